import CountdownCore
import Dispatch
import FoundationEssentials

/// Why an etcd call failed.
enum EtcdError: Error, Equatable, CustomStringConvertible {
    /// No member could be reached (each was tried); nothing happened.
    case unreachable(String)
    /// The request may have reached a member and its result is unknown (a timeout or a lost
    /// connection after sending): a change may or may not have been made.
    case ambiguous(String)
    /// A member answered with an error (no leader, compacted, permission denied, …).
    case server(code: Int, message: String)
    /// A member answered something that is not etcd's JSON.
    case malformed(String)

    var description: String {
        switch self {
        case .unreachable(let why): return "no etcd member could be reached (\(why))"
        case .ambiguous(let why): return "etcd did not confirm the change, so it may or may not have been made (\(why))"
        case .server(let code, let message): return "etcd refused: \(message) (gRPC code \(code))"
        case .malformed(let why): return "etcd answered something unreadable: \(why)"
        }
    }
}

/// One key's value and revisions, as etcd returns it.
struct EtcdKeyValue: Equatable {
    var key: String
    var value: [UInt8]
    var createRevision: Int64
    var modRevision: Int64
}

/// A change seen by a watch.
struct EtcdWatchEvent: Equatable {
    enum Kind: Equatable { case put, delete }
    var kind: Kind
    var keyValue: EtcdKeyValue
}

/// etcd v3 through its HTTP/JSON gateway (`/v3/…`), on `CurlDriver`: unary calls with a
/// deadline, and watches that stream. Keys and values are base64 in the JSON, as the gateway
/// wants; revisions are decimal strings there.
///
/// Members are tried in turn: a call that could not connect goes to the next member at once;
/// one that may have arrived is reported `ambiguous`, never silently retried. Every request
/// carries the `hasleader` metadata, so that a member cut off from the quorum refuses it
/// instead of holding it.
///
/// Confined to the daemon's queue.
final class EtcdClient {
    private let driver: CurlDriver
    private let queue: DispatchQueue
    /// The members' client URLs (`http://127.0.0.1:2379`).
    let endpoints: [String]
    /// TLS to the members, when they use it.
    let tlsFiles: TLSFiles?
    /// The member tried first; moves on when one cannot be reached.
    private(set) var currentEndpoint = 0
    /// `/v3/auth/authenticate`'s token, once authenticated.
    private var authToken: String?
    private let credentials: (user: String, password: String)?

    /// Where its deadlines are measured.
    private let time: DaemonClock

    init(
        endpoints: [String], tls: TLSFiles? = nil, credentials: (user: String, password: String)? = nil, driver: CurlDriver, queue: DispatchQueue,
        time: DaemonClock = .system
    ) {
        precondition(!endpoints.isEmpty, "an etcd client needs at least one member")
        self.time = time
        self.endpoints = endpoints
        self.tlsFiles = tls
        self.credentials = credentials
        self.driver = driver
        self.queue = queue
    }

    // MARK: - Calls

    /// POSTs `body` (JSON) to `path` on a member, trying the next one for as long as none could
    /// be reached, all within `timeoutMilliseconds`. `completion` runs on the queue with the
    /// answer decoded as `Answer`.
    func call<Body: Encodable, Answer: Decodable>(
        _ path: String, _ body: Body, answer: Answer.Type, timeoutMilliseconds: Int = 3000,
        completion: @escaping (Result<Answer, EtcdError>) -> Void
    ) {
        dispatchPrecondition(condition: .onQueue(queue))
        let bytes: [UInt8]
        if let handWritten = body as? any HandWrittenJSON {
            bytes = handWritten.json
        } else if let encoded = try? JSONEncoder().encode(body) {
            bytes = Array(encoded)
        } else {
            completion(.failure(.malformed("the request to \(path) could not be encoded")))
            return
        }
        let deadline = time.now().advanced(byMilliseconds: Int64(timeoutMilliseconds))
        attempt(path, bytes, deadline: deadline, triesLeft: endpoints.count) { result in
            completion(result.flatMap { answer, endpoint in Self.decode(answer, as: Answer.self, from: endpoint) })
        }
    }

    private func attempt(
        _ path: String, _ body: [UInt8], deadline: Instant, triesLeft: Int, authenticated: Bool = false,
        completion: @escaping (Result<(body: [UInt8], endpoint: String), EtcdError>) -> Void
    ) {
        // Every member tried shares the call's time: a call never takes longer than it was given.
        let timeoutMilliseconds = max(1, Int(deadline.nanoseconds(since: time.now()) / 1_000_000))
        let endpoint = endpoints[currentEndpoint]
        let request = HTTPRequest(
            url: endpoint + path, body: body, headers: headers(), timeoutMilliseconds: timeoutMilliseconds, tls: tlsFiles
        )
        driver.post(request) { [self] result in
            switch result {
            case .failure(let failure) where !failure.mayHaveArrived:
                rotate(from: endpoint)
                guard triesLeft > 1, deadline.nanoseconds(since: time.now()) > 50_000_000 else {
                    completion(.failure(.unreachable("\(endpoint): \(failure.message)")))
                    return
                }
                attempt(path, body, deadline: deadline, triesLeft: triesLeft - 1, completion: completion)
            case .failure(let failure):
                rotate(from: endpoint)
                completion(.failure(.ambiguous("\(endpoint): \(failure.message)")))
            case .success(let response):
                let accepted = Self.accepted(response, from: endpoint)
                // An expired token (etcd forgets idle ones): log in again, and ask once more.
                if case .failure(.server(_, let message)) = accepted, message.contains("invalid auth token"),
                   credentials != nil, path != "/v3/auth/authenticate", !authenticated {
                    authenticate { [self] error in
                        if let error {
                            completion(.failure(error))
                        } else {
                            attempt(path, body, deadline: deadline, triesLeft: triesLeft, authenticated: true, completion: completion)
                        }
                    }
                    return
                }
                completion(accepted.map { ($0, endpoint) }.mapError { error in
                    if case .server(let code, _) = error, code == 14 || code == 4 {
                        rotate(from: endpoint)  // Unavailable (no leader) or deadline: try another next time.
                    }
                    return error
                })
            }
        }
    }

    /// Moves to the next member, unless another call already did.
    private func rotate(from endpoint: String) {
        if endpoints[currentEndpoint] == endpoint {
            currentEndpoint = (currentEndpoint + 1) % endpoints.count
        }
    }

    /// Starts a streaming request (a watch) on the driver.
    func startStream(
        _ request: HTTPRequest, onData: @escaping ([UInt8]) -> Void, completion: @escaping (Result<HTTPResponse, HTTPFailure>) -> Void
    ) -> CurlDriver.TransferID? {
        driver.post(request, onData: onData, completion: completion)
    }

    /// Ends a streaming request.
    func cancelStream(_ transfer: CurlDriver.TransferID) {
        driver.cancel(transfer)
    }

    /// A stream from `endpoint` broke: the next call goes to another member.
    func rotateAfterFailure(of endpoint: String) {
        rotate(from: endpoint)
    }

    /// The header lines every request carries: `hasleader`, and the auth token once there is one.
    func headers() -> [String] {
        var lines = ["Grpc-Metadata-hasleader: true"]
        if let authToken { lines.append("Authorization: \(authToken)") }
        return lines
    }

    /// The body of an answer with status 200. Any other status with a JSON object is etcd's
    /// refusal, with its gRPC code and message; without one (a proxy's error page) it is malformed.
    static func accepted(_ response: HTTPResponse, from endpoint: String) -> Result<[UInt8], EtcdError> {
        guard response.status != 200 else { return .success(response.body) }
        guard let refusal = try? JSONDecoder().decode(EtcdAnswer.Refusal.self, from: Data(response.body)) else {
            return .failure(.malformed("\(endpoint) answered HTTP \(response.status) with \(response.body.count) bytes that are not a JSON object"))
        }
        return .failure(.server(code: refusal.code ?? -1, message: refusal.message ?? refusal.error ?? "HTTP \(response.status)"))
    }

    /// An accepted answer's body, decoded as `Answer`.
    static func decode<Answer: Decodable>(_ body: [UInt8], as: Answer.Type, from endpoint: String) -> Result<Answer, EtcdError> {
        do {
            return .success(try JSONDecoder().decode(Answer.self, from: Data(body)))
        } catch {
            return .failure(.malformed("\(endpoint) answered HTTP 200 with \(body.count) bytes that are not the JSON of \(Answer.self) (\(error))"))
        }
    }

    /// `/v3/auth/authenticate`'s body.
    struct Credentials: Encodable {
        var name: String
        var password: String
    }

    /// Logs in with the credentials given at creation (etcd's own users, `/v3/auth/authenticate`);
    /// later calls carry the token.
    func authenticate(completion: @escaping (EtcdError?) -> Void) {
        guard let credentials else {
            completion(nil)
            return
        }
        call("/v3/auth/authenticate", Credentials(name: credentials.user, password: credentials.password), answer: EtcdAnswer.Authentication.self) { [self] result in
            switch result {
            case .success(let answer):
                authToken = answer.token
                completion(authToken == nil ? .malformed("no token in the answer to authenticate") : nil)
            case .failure(let error):
                completion(error)
            }
        }
    }

    // MARK: - Encoding

    /// Base64 of a key or value, as the gateway wants bytes.
    static func encode(_ text: String) -> String {
        Data(text.utf8).base64EncodedString()
    }

    static func encode(bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
    }

    /// The end of the range of every key that starts with `prefix` (the prefix with its last
    /// byte incremented), base64.
    static func prefixEnd(_ prefix: String) -> String {
        var bytes = Array(prefix.utf8)
        while let last = bytes.last {
            if last < 0xFF {
                bytes[bytes.count - 1] = last + 1
                return encode(bytes: bytes)
            }
            bytes.removeLast()
        }
        return encode(bytes: [0])  // Every key.
    }
}
