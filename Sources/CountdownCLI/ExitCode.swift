import CountdownCore

/// `cdctl`'s exit codes. Each is documented in `cdctl --help`, the man page and README.
public enum ExitCode: Int32, Sendable, CaseIterable {
    /// Success (for `wait`: every countdown finished `done`).
    case success = 0
    /// The daemon refused the request (bad name or duration, forbidden, limit, …).
    case refused = 1
    /// The command line was wrong.
    case usage = 2
    /// No countdown has that name (or it already finished, for cancel/pause/resume/extend).
    case notFound = 3
    /// The countdown is busy: already running or paused (start), or in the wrong state.
    case busy = 4
    /// `wait`: a countdown was cancelled instead of finishing.
    case cancelled = 5
    /// The daemon is not reachable, or the connection was lost.
    case unavailable = 6

    /// The exit code for a daemon error code.
    public init(errorCode: ErrorCode?) {
        switch errorCode {
        case .notFound?: self = .notFound
        case .busy?: self = .busy
        default: self = .refused
        }
    }
}

