import CountdownCore

/// What the client table asks of whoever serves its requests (the daemon). The table frames
/// input and runs each connection's turn; the server decides how much a turn may serve, serves
/// one request at a time, and queues replies back (`ClientTable.send`). Called on the queue,
/// within a batch.
protocol RequestServer: AnyObject {
    /// A connection's turn begins: what fell due is run first, and the answer is how many
    /// requests it may be served (0: it waits for the next batch, having had its share).
    func beginTurn(of connection: Connection) -> Int

    /// Serves one framed request of `connection`, its reply queued through `ClientTable.send`.
    /// `bounded` is false for the last lines of a peer that closed its sending side, which are
    /// all answered.
    func serve(_ frame: LineFramer.Frame, of connection: Connection, bounded: Bool) -> ServeVerdict

    /// The connection is being closed, or cut off for overflow: it follows nothing any more.
    func connectionClosed(_ connection: Connection)

    /// Everything queued on the connection was written (a subscriber held for being behind
    /// takes ticks again).
    func outputDrained(_ connection: Connection)

    /// Produces the next slice of the listing on `connection` from `progress` (and queues it:
    /// `ClientOutput.besideEvents`), advancing `progress`. The table ends the listing after its
    /// last slice.
    func continueListing(_ progress: inout ListingInProgress, on connection: Connection)
}

/// What a served request means for the rest of its connection's turn.
enum ServeVerdict {
    /// Its next request may be served.
    case next
    /// The turn ends here: the batch's time or the user's share of it is used; what is left is
    /// served in the next batch.
    case endTurn
    /// Not served: it would take its user past its share of this batch, where the user has been
    /// served already. The line goes back to the framer, the turn ends, and the line is served
    /// first in the next batch (where the share starts again).
    case notNow
    /// `QUIT`: nothing more is read, and the connection closes once its output is written.
    case quit
}

/// What the daemon queues on a connection (`ClientTable.send`).
enum ClientOutput {
    /// A request's reply: in request order, after replies still waiting for the store.
    case reply([UInt8])
    /// Output beside events, not behind replies waiting for the store: a listing's slices, a
    /// subscriber's snapshots, `RESYNC`.
    case besideEvents([UInt8])
    /// One event line for a subscriber (past `--output-limit` the client is cut off instead).
    case event([UInt8])
    /// A delivery's stream of event lines, its bytes shared with every other queue that takes
    /// them (`OutputQueue.appendShared`); the same limit.
    case sharedEvents([UInt8])
    /// The store decided `ticket`: its reply takes its place, and the replies then ready go out.
    case answer(StoreTicket, [UInt8])
    /// The rest of a reply in slices, from `ListingInProgress` (its first slice went out as part
    /// of the reply): the connection is read no more until it ends, and the table continues it
    /// (`RequestServer.continueListing`), a slice each batch while its output has room. It
    /// replaces a listing in progress (the one its request began before a failed commit); one
    /// already finished only ends that one.
    case listing(ListingInProgress)
    /// A slice a failed commit took back, produced again now from the progress it was produced
    /// from (nothing, for a connection that stopped taking output meanwhile).
    case listingSliceAgain(ListingInProgress)
}
