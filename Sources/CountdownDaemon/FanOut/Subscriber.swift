import CountdownCore

/// A connection as the fan-out knows it: what it follows, which kinds of events it takes, and
/// whether its ticks are held for being behind. Owned by `EventFanOut`, which alone changes it;
/// the connection itself is a handle whose output only the client table touches.
final class Subscriber {
    /// The connection events are queued on (through `ClientTable.send`).
    let connection: Connection
    /// The connection's id, for the fan-out's maps.
    let id: Int
    /// The uid of the connecting process: what "everything" means for it, and how names read.
    let uid: UInt32
    /// What it follows.
    var subscription = Subscription.none
    /// Which kinds of events it takes (`SUBSCRIBE … EVENTS`).
    var eventKinds = EventKindSet.all
    /// It is sent no ticks for now: it fell behind, until its output drains.
    var areTicksHeld = false

    init(_ connection: Connection) {
        self.connection = connection
        id = connection.id
        uid = connection.peerUID
    }
}
