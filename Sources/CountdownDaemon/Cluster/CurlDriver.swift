import CCurl
import CLinuxShims
import Dispatch
import Glibc

/// An HTTP request for `CurlDriver`.
struct HTTPRequest {
    /// The full URL.
    var url: String
    /// Sent as the POST body.
    var body: [UInt8]
    /// Extra header lines (`Name: value`).
    var headers: [String] = []
    /// The whole transfer must end within this (0: no limit, for a stream such as a watch).
    var timeoutMilliseconds = 0
    /// Connecting must succeed within this.
    var connectTimeoutMilliseconds = 2000
    /// TLS: the CA bundle that signs the server's certificate, and this client's certificate and key.
    var tls: TLSFiles?
}

/// The files for TLS to a server that wants a client certificate.
struct TLSFiles: Equatable, Sendable {
    var certificateAuthority: String?
    var certificate: String?
    var key: String?
}

/// A finished transfer: the HTTP status and the whole body.
struct HTTPResponse {
    var status: Int
    var body: [UInt8]
}

/// Why a transfer did not finish with a response.
struct HTTPFailure: Error, CustomStringConvertible {
    /// libcurl's code.
    var code: Int32
    /// libcurl's message, and what it was doing.
    var message: String
    /// Whether the request may have reached the server (the connection was made): then a change
    /// it asked for may have happened, and retrying it elsewhere is not safe.
    var mayHaveArrived: Bool

    var description: String { message }
}

/// HTTP transfers through libcurl's multi-socket interface, driven by the daemon's own epoll
/// poller and a timerfd: no thread per request, no blocking call. libcurl says which sockets to
/// watch (`socketChanged`) and when to wake it (`timerChanged`); the poller's handlers, on the
/// daemon's queue, hand readiness back with `curl_multi_socket_action`, and finished transfers
/// are collected after each call.
///
/// Confined to the daemon's queue.
final class CurlDriver {
    /// Identifies a transfer, to cancel it.
    struct TransferID: Hashable {
        fileprivate let handle: UnsafeMutableRawPointer
    }

    /// One transfer in flight.
    private final class Transfer {
        let handle: UnsafeMutableRawPointer
        var headerList: UnsafeMutablePointer<curl_slist>?
        var received: [UInt8] = []
        /// For a stream: each chunk as it arrives (then `received` stays empty).
        let onData: (([UInt8]) -> Void)?
        let completion: (Result<HTTPResponse, HTTPFailure>) -> Void

        init(handle: UnsafeMutableRawPointer, onData: (([UInt8]) -> Void)?, completion: @escaping (Result<HTTPResponse, HTTPFailure>) -> Void) {
            self.handle = handle
            self.onData = onData
            self.completion = completion
        }

        /// Bytes of a stream not yet handed to `onData`: libcurl's write callback only collects
        /// them, and `CurlDriver` hands them on once libcurl has returned, so that `onData` may
        /// start or cancel transfers (which libcurl forbids inside its callbacks).
        var undelivered: [UInt8] = []

        func append(_ bytes: UnsafeRawBufferPointer) {
            if onData != nil {
                undelivered.append(contentsOf: bytes)
            } else {
                received.append(contentsOf: bytes)
            }
        }
    }

    private let queue: DispatchQueue
    private let poller: EventPoller
    private let multi: UnsafeMutableRawPointer
    private var sockets: [Int32: EventPoller.Token] = [:]
    private var transfers: [UnsafeMutableRawPointer: Transfer] = [:]
    private let timerDescriptor: Int32
    private var timerToken: EventPoller.Token?

    /// libcurl's global state, set up once before the first handle.
    private static let globalSetUp: CURLcode = curl_global_init(Int(CURL_GLOBAL_DEFAULT))

    /// Creates the driver and registers its timer with `poller`. Call on the queue.
    init(poller: EventPoller, queue: DispatchQueue) throws(DaemonError) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard Self.globalSetUp == CURLE_OK else {
            throw .unusableLibrary("libcurl could not set itself up (curl_global_init: \(String(cString: curl_easy_strerror(Self.globalSetUp))))")
        }
        self.queue = queue
        self.poller = poller
        guard let multi = curl_multi_init() else { throw .system("curl_multi_init", ENOMEM) }
        self.multi = multi
        let fd = timerfd_create(CLOCK_MONOTONIC, Int32(TFD_NONBLOCK | TFD_CLOEXEC))
        guard fd >= 0 else {
            let code = errno
            Self.release(multi)
            throw .system("timerfd_create(CLOCK_MONOTONIC)", code)
        }
        timerDescriptor = fd
        // The callbacks get this driver back through an unretained pointer: the driver outlives
        // every call, since `close` clears the callbacks before it goes.
        let context = Unmanaged.passUnretained(self).toOpaque()
        let socketFunction = countdownd_curl_multi_set_socket_function(multi, { _, socket, what, context, _ in
            // The context is the driver set just above: never nil.
            // Always 0, on purpose: -1 would make libcurl abort every transfer of the multi
            // handle, the watch included. A socket the poller cannot watch leaves its transfer to
            // run into its own timeout and fail; nothing else is lost.
            _ = Unmanaged<CurlDriver>.fromOpaque(context!).takeUnretainedValue().socketChanged(socket, what: what)
            return 0
        }, context)
        let timerFunction = countdownd_curl_multi_set_timer_function(multi, { _, milliseconds, context in
            // 0 for the same reason. Should the timerfd not take the time, the transfers' own
            // deadlines end them when their sockets are next active.
            _ = Unmanaged<CurlDriver>.fromOpaque(context!).takeUnretainedValue().timerChanged(milliseconds)
            return 0
        }, context)
        do throws(DaemonError) {
            guard socketFunction == CURLM_OK, timerFunction == CURLM_OK else {
                let code = socketFunction == CURLM_OK ? timerFunction : socketFunction
                throw .unusableLibrary("libcurl refused the daemon's socket or timer callback (\(String(cString: curl_multi_strerror(code))))")
            }
            timerToken = try poller.register(fd, interest: .readable) { [unowned self] _ in
                var expirations: UInt64 = 0
                // Ignored on purpose: only clears the timer; EAGAIN means it was re-armed meanwhile.
                _ = read(timerDescriptor, &expirations, MemoryLayout<UInt64>.size)
                act(on: CURL_SOCKET_TIMEOUT, flags: 0)
            }
        } catch {
            countdownd_close(fd)
            Self.release(multi)
            throw error
        }
    }

    /// curl_multi_cleanup. Ignored on purpose: it fails only for a handle that is not a multi
    /// handle, and nothing is left to do with one being thrown away.
    private static func release(_ multi: UnsafeMutableRawPointer) {
        _ = curl_multi_cleanup(multi)  // Ignored on purpose: see above.
    }

    /// How many transfers are in flight.
    var activeCount: Int { transfers.count }

    /// Starts a POST. `completion` runs on the queue exactly once, after the transfer ends or
    /// fails (or, with `onData`, after the stream ends); `onData` gets a stream's bytes as they come.
    @discardableResult
    func post(
        _ request: HTTPRequest, onData: (([UInt8]) -> Void)? = nil, completion: @escaping (Result<HTTPResponse, HTTPFailure>) -> Void
    ) -> TransferID? {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let handle = curl_easy_init() else {
            completion(.failure(HTTPFailure(code: -1, message: "libcurl could not create a transfer", mayHaveArrived: false)))
            return nil
        }
        let transfer = Transfer(handle: handle, onData: onData, completion: completion)
        // Every option is checked: a refused one (out of memory, a TLS option this libcurl's
        // back end lacks) fails the transfer before it starts, rather than sending it without.
        var refused: (option: String, code: CURLcode)?
        func set(_ option: String, _ code: CURLcode) {
            if code != CURLE_OK && refused == nil { refused = (option, code) }
        }
        set("URL", countdownd_curl_easy_set_string(handle, CURLOPT_URL, request.url))
        set("POSTFIELDSIZE", countdownd_curl_easy_set_long(handle, CURLOPT_POSTFIELDSIZE, request.body.count))
        request.body.withUnsafeBufferPointer { body in
            // Copied by libcurl: the bytes need not outlive this call.
            set("COPYPOSTFIELDS", countdownd_curl_easy_set_pointer(handle, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: body.baseAddress ?? UnsafePointer(bitPattern: 1))))
        }
        var headers: UnsafeMutablePointer<curl_slist>?
        for line in ["Content-Type: application/json", "Expect:"] + request.headers {
            // NULL is out of memory, and leaves the list as it was: the transfer is refused
            // rather than sent without a header.
            guard let longer = curl_slist_append(headers, line) else {
                set("HTTPHEADER", CURLE_OUT_OF_MEMORY)
                break
            }
            headers = longer
        }
        transfer.headerList = headers
        set("HTTPHEADER", countdownd_curl_easy_set_pointer(handle, CURLOPT_HTTPHEADER, UnsafeMutableRawPointer(headers)))
        set("TIMEOUT_MS", countdownd_curl_easy_set_long(handle, CURLOPT_TIMEOUT_MS, request.timeoutMilliseconds))
        set("CONNECTTIMEOUT_MS", countdownd_curl_easy_set_long(handle, CURLOPT_CONNECTTIMEOUT_MS, request.connectTimeoutMilliseconds))
        set("NOSIGNAL", countdownd_curl_easy_set_long(handle, CURLOPT_NOSIGNAL, 1))
        set("TCP_NODELAY", countdownd_curl_easy_set_long(handle, CURLOPT_TCP_NODELAY, 1))
        if let tls = request.tls {
            if let file = tls.certificateAuthority { set("CAINFO", countdownd_curl_easy_set_string(handle, CURLOPT_CAINFO, file)) }
            if let file = tls.certificate { set("SSLCERT", countdownd_curl_easy_set_string(handle, CURLOPT_SSLCERT, file)) }
            if let file = tls.key { set("SSLKEY", countdownd_curl_easy_set_string(handle, CURLOPT_SSLKEY, file)) }
        }
        set("WRITEFUNCTION", countdownd_curl_easy_set_write_function(handle) { data, size, count, context in
            // The context is the transfer, kept alive by the driver's table until it completes.
            let transfer = Unmanaged<Transfer>.fromOpaque(context!).takeUnretainedValue()
            transfer.append(UnsafeRawBufferPointer(start: data, count: size * count))
            return size * count
        })
        set("WRITEDATA", countdownd_curl_easy_set_pointer(handle, CURLOPT_WRITEDATA, Unmanaged.passUnretained(transfer).toOpaque()))
        transfers[handle] = transfer
        if let refused {
            let message = "libcurl refused CURLOPT_\(refused.option): \(String(cString: curl_easy_strerror(refused.code)))"
            finish(handle, result: .failure(HTTPFailure(code: Int32(refused.code.rawValue), message: message, mayHaveArrived: false)))
            return nil
        }
        let added = curl_multi_add_handle(multi, handle)
        guard added == CURLM_OK else {
            finish(handle, result: .failure(HTTPFailure(code: Int32(added.rawValue), message: String(cString: curl_multi_strerror(added)), mayHaveArrived: false)))
            return nil
        }
        return TransferID(handle: handle)
    }

    /// Ends a transfer now; its completion runs with a failure saying it was cancelled.
    func cancel(_ id: TransferID) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard transfers[id.handle] != nil else { return }
        finish(id.handle, result: .failure(HTTPFailure(code: -2, message: "cancelled", mayHaveArrived: true)))
    }

    /// Cancels every transfer and releases libcurl's handles and the timer.
    func close() {
        dispatchPrecondition(condition: .onQueue(queue))
        for handle in Array(transfers.keys) {
            finish(handle, result: .failure(HTTPFailure(code: -2, message: "the daemon is stopping", mayHaveArrived: true)))
        }
        if let timerToken { poller.unregister(timerToken) }
        timerToken = nil
        countdownd_close(timerDescriptor)
        Self.release(multi)
    }

    // MARK: - libcurl's callbacks (inside curl_multi_* calls, on the queue)

    /// libcurl wants `socket` watched for `what` (in, out, both) or forgotten.
    /// - Returns: whether the poller does as asked.
    private func socketChanged(_ socket: Int32, what: Int32) -> Bool {
        var interest: EventPoller.Interest = []
        if what == CURL_POLL_IN || what == CURL_POLL_INOUT { interest.insert(.readable) }
        if what == CURL_POLL_OUT || what == CURL_POLL_INOUT { interest.insert(.writable) }
        if what == CURL_POLL_REMOVE {
            if let token = sockets.removeValue(forKey: socket) {
                poller.unregister(token)
            }
            return true
        }
        if let token = sockets[socket] {
            return (try? poller.setInterest(interest, for: token)) != nil
        }
        do {
            sockets[socket] = try poller.register(socket, interest: interest) { [unowned self] readiness in
                var flags: Int32 = 0
                if readiness.readable { flags |= CURL_CSELECT_IN }
                if readiness.writable { flags |= CURL_CSELECT_OUT }
                act(on: socket, flags: flags)
            }
            return true
        } catch {
            return false  // libcurl fails the transfer; the caller sees it as any failed request.
        }
    }

    /// libcurl wants to be woken in `milliseconds` (-1: not at all).
    /// - Returns: whether the timer is set.
    private func timerChanged(_ milliseconds: Int) -> Bool {
        var spec = itimerspec()
        if milliseconds >= 0 {
            // An all-zero it_value would disarm the timer: at least 1 µs.
            let nanoseconds = max(Int64(milliseconds) * 1_000_000, 1000)
            spec.it_value.tv_sec = Int(nanoseconds / 1_000_000_000)
            spec.it_value.tv_nsec = Int(nanoseconds % 1_000_000_000)
        }
        return timerfd_settime(timerDescriptor, 0, &spec, nil) == 0
    }

    // MARK: - Driving

    private func act(on socket: Int32, flags: Int32) {
        var running: Int32 = 0
        // Ignored on purpose: its error concerns only this call (a socket libcurl has already
        // dropped); each transfer's own outcome comes through collectFinished.
        _ = curl_multi_socket_action(multi, socket, flags, &running)
        deliverStreams()
        collectFinished()
    }

    /// Hands each stream what libcurl wrote into it during the last call.
    private func deliverStreams() {
        for transfer in Array(transfers.values) where !transfer.undelivered.isEmpty {
            let bytes = transfer.undelivered
            transfer.undelivered.removeAll(keepingCapacity: true)
            transfer.onData?(bytes)
        }
    }

    /// Completes every transfer libcurl reports finished.
    private func collectFinished() {
        var left: Int32 = 0
        while let message = curl_multi_info_read(multi, &left) {
            var handle: UnsafeMutableRawPointer?
            var code = CURLE_OK
            guard countdownd_curl_message_done(message, &handle, &code) != 0, let handle else { continue }
            if code == CURLE_OK {
                var status = 0
                // Ignored on purpose: a finished transfer always has it; were it missing, status
                // 0 is no HTTP answer, which every caller takes as a failure.
                _ = countdownd_curl_easy_get_long(handle, CURLINFO_RESPONSE_CODE, &status)
                finish(handle, result: .success(HTTPResponse(status: status, body: transfers[handle]?.received ?? [])))
            } else {
                // Nothing of the request was sent (no connection, a failed TLS handshake): it
                // cannot have arrived, and another member may be tried.
                var sent = 0
                // Unknown (the query failed) counts as sent: then it may have arrived.
                let known = countdownd_curl_easy_get_long(handle, CURLINFO_REQUEST_SIZE, &sent) == CURLE_OK
                let arrived = !known || sent > 0
                finish(handle, result: .failure(HTTPFailure(code: Int32(code.rawValue), message: String(cString: curl_easy_strerror(code)), mayHaveArrived: arrived)))
            }
        }
    }

    private func finish(_ handle: UnsafeMutableRawPointer, result: Result<HTTPResponse, HTTPFailure>) {
        guard let transfer = transfers.removeValue(forKey: handle) else { return }
        // Ignored on purpose: a transfer refused before it was added is not there to remove; its
        // handle is cleaned up either way.
        _ = curl_multi_remove_handle(multi, handle)
        curl_easy_cleanup(handle)
        curl_slist_free_all(transfer.headerList)
        transfer.completion(result)
    }
}
