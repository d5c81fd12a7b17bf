/// A time zone's rules as `--at` needs them: the offset from UTC in force at an instant, and the
/// abbreviation the clock shows then. cdctl uses the system's (`SystemLocalZone`); tests give
/// rules of their own.
public protocol LocalZone {
    /// The offset and abbreviation in force at `unixSeconds`.
    func offset(atUnixSeconds unixSeconds: Int64) -> LocalOffset
}

/// An offset from UTC and the abbreviation shown with it (`CEST`, `+0530`, `UTC`).
public struct LocalOffset: Equatable, Sendable {
    /// Seconds east of UTC.
    public var seconds: Int
    public var abbreviation: String

    public init(seconds: Int, abbreviation: String) {
        self.seconds = seconds
        self.abbreviation = abbreviation
    }
}

/// A zone whose offset never changes, such as UTC.
public struct FixedOffsetZone: LocalZone, Sendable {
    public let fixed: LocalOffset

    public init(seconds: Int, abbreviation: String) {
        fixed = LocalOffset(seconds: seconds, abbreviation: abbreviation)
    }

    public static let utc = FixedOffsetZone(seconds: 0, abbreviation: "UTC")

    public func offset(atUnixSeconds unixSeconds: Int64) -> LocalOffset { fixed }
}
