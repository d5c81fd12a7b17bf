import CLinuxShims

/// The names of the daemon's threads, as `ps -L`, `top -H` and systemd's messages show them: the
/// main thread keeps `countdownd` (it polls and runs the state queue's batches); a libdispatch
/// worker takes the name of the work it is doing when it starts a block of ours, instead of
/// libdispatch's `-qos.overcommit`. Each block that names its thread runs rarely (a snapshot, a
/// status line, a burst of closes), so the `prctl` costs nothing on the hot path.
enum ThreadName: String {
    /// `EventPoller.start`'s thread, when the poll loop is not on the main thread (tests).
    case poll = "cd-poll"
    /// The state queue's work handed over from another thread (a snapshot's end).
    case state = "cd-state"
    /// `StateJournal`'s snapshot writer.
    case snapshot = "cd-snapshot"
    /// `SystemdNotifier`'s STATUS= sender.
    case status = "cd-status"
    /// `DescriptorCloser`'s thread.
    case closer = "cd-closer"
    /// Recovery's reader of the journal, at start (`JournalChainReader`).
    case journalReader = "cd-journal"
    /// Recovery's decoder of the snapshot's countdowns, at start.
    case snapshotDecoder = "cd-decode"

    /// Names the calling thread.
    func apply() {
        // Ignored on purpose: PR_SET_NAME fails only for a bad pointer; a name longer than the
        // kernel's 15 bytes is cut, not refused (these are shorter).
        _ = countdownd_set_thread_name(rawValue)
    }
}
