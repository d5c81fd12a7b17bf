/// A request body that writes its own JSON (`EtcdClient.call` sends it as it is): one sent often
/// enough for `JSONEncoder` to show in a profile. It must mean what its `Encodable` form means
/// (the tests read both back and compare them).
protocol HandWrittenJSON {
    /// The body's JSON text.
    var json: [UInt8] { get }
}
