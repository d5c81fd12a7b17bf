/// What all the connections of one non-root uid hold queued together, for
/// `--output-limit-per-user`: one object shared by those connections, so that counting an
/// appended event costs no lookup.
final class UserOutput {
    /// The sum of the uid's connections' `OutputQueue.footprint`s, as each last counted it
    /// (`Connection.countedOutput`).
    var footprint = 0
}
