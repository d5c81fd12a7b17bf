import CountdownCore

extension OwnerSequences {
    /// Takes in a journal record read back (recovery and `--check-state`/`--repair-state` alike):
    /// its owner's number, or, for a record written before per-user numbers, the daemon-wide
    /// number, which every user saw then.
    mutating func take(_ record: JournalFormat.EventRecord) {
        if record.numberedByOwner {
            raise(record.event.owner, to: record.event.ownerSequence)
        } else {
            raiseBase(to: record.event.sequence)
        }
    }

    /// What a snapshot's contents start each user from: its table, or, written before per-user
    /// numbers, every user after the daemon-wide number.
    init(startingFrom snapshot: SnapshotFile.Contents) {
        self = snapshot.ownerSequences ?? OwnerSequences(base: snapshot.lastSequence)
    }
}
