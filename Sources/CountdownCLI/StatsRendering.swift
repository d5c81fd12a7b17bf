import CountdownClient

/// `cdctl stats --json` and `--prometheus`.
public enum StatsRendering {
    /// One JSON object, keys as the daemon sent them, numbers as numbers.
    public static func json(_ stats: [StatEntry]) -> String {
        let members = stats.map { entry in
            let value = Int64(entry.value).map(String.init) ?? "\"\(entry.value)\""
            return "\"\(entry.key)\":\(value)"
        }
        return "{" + members.joined(separator: ",") + "}\n"
    }

    /// How a STATS key becomes a Prometheus sample: its family, labels, and unit.
    private struct Sample {
        /// `{label="value"}`, or a summary's `_sum`/`_count` suffix.
        var labels = ""
        var key: String
        /// The daemon counts microseconds; Prometheus wants seconds.
        var microseconds = false
        /// The same for milliseconds.
        var milliseconds = false
    }

    /// Prometheus's text exposition format (checked by `promtool check metrics`): every family
    /// with `# HELP` and `# TYPE`, counters ending in `_total`, lateness as a summary in seconds
    /// (quantiles 0.5 and 0.99, `_sum`, `_count`) with its maximum as a gauge of its own, and
    /// numbers written exactly (microseconds as six decimals, never float noise). Keys of a newer
    /// daemon become gauges if numeric, and are skipped if not.
    public static func prometheus(_ stats: [StatEntry]) -> String {
        let values = Dictionary(stats.map { ($0.key, $0.value) }, uniquingKeysWith: { first, _ in first })
        var out = ""
        var handled: Set<String> = ["version", "scope"]
        func family(_ name: String, _ type: String, _ help: String, _ samples: [Sample]) {
            let present = samples.filter { values[$0.key].flatMap { Int64($0) } != nil }
            guard !present.isEmpty else { return }
            out += "# HELP countdownd_\(name) \(help)\n# TYPE countdownd_\(name) \(type)\n"
            for sample in present {
                // Filtered above: each key has an integer value.
                let value = Int64(values[sample.key] ?? "") ?? 0
                let shown = sample.microseconds ? seconds(microseconds: value) : sample.milliseconds ? seconds(microseconds: value * 1000) : String(value)
                out += "countdownd_\(name)\(sample.labels) \(shown)\n"
                handled.insert(sample.key)
            }
        }
        func gauge(_ name: String, _ help: String, _ key: String, microseconds: Bool = false) {
            family(name, "gauge", help, [Sample(key: key, microseconds: microseconds)])
        }
        func counter(_ name: String, _ help: String, _ key: String) {
            family(name, "counter", help, [Sample(key: key)])
        }
        family("countdowns", "gauge", "Countdowns held, by state.", [
            Sample(labels: "{state=\"running\"}", key: "running"), Sample(labels: "{state=\"paused\"}", key: "paused"),
            Sample(labels: "{state=\"finished\"}", key: "finished"),
        ])
        gauge("connections", "Client connections.", "connections")
        gauge("subscribers", "Connections subscribed to events.", "subscribers")
        gauge("subscribers_behind", "Subscribers sent no ticks for now, for being more than 64 KiB behind.", "subscribers_behind")
        gauge("listings_in_progress", "LISTs and subscriber snapshots being produced in slices.", "listings_in_progress")
        gauge("uptime_seconds", "Seconds since the daemon started.", "uptime_s")
        gauge("last_seq", "Number of the last lifecycle event.", "last_seq")
        let kinds = stats.map(\.key).filter { $0.hasPrefix("events_") }
        family("events_total", "counter", "Events emitted since start, by kind.", kinds.map {
            Sample(labels: "{kind=\"\($0.dropFirst("events_".count))\"}", key: $0)
        })
        for event in ["done", "tick"] {
            family("\(event)_lateness_seconds", "summary", "How late \(event) events went out after they were due.", [
                Sample(labels: "{quantile=\"0.5\"}", key: "\(event)_late_p50_us", microseconds: true),
                Sample(labels: "{quantile=\"0.99\"}", key: "\(event)_late_p99_us", microseconds: true),
                Sample(labels: "_sum", key: "\(event)_late_sum_us", microseconds: true),
                Sample(labels: "_count", key: "\(event)_late_count"),
            ])
            gauge("\(event)_lateness_max_seconds", "The latest \(event) event since start, after it was due.", "\(event)_late_max_us", microseconds: true)
        }
        gauge("journal_bytes", "Journal bytes written since the last snapshot.", "journal_bytes")
        gauge("journal_generation", "Number of the journal file in use.", "journal_generation")
        gauge("replay_kept_after", "SUBSCRIBE ... SINCE can replay every event numbered after this.", "replay_kept_after")
        counter("batches_undone_total", "Batches undone because their storage commit failed.", "batches_undone")
        counter("listing_slices_redone_total", "Listing slices produced again after their batch was undone.", "listing_slices_redone")
        gauge("user_output_peak_bytes", "The most output one non-root user's connections held queued together since start (bounded by --output-limit-per-user).", "user_output_peak_bytes")
        gauge("cluster_revision", "Cluster mode: the last etcd revision applied.", "cluster_revision")
        gauge("cluster_watching", "Cluster mode: whether the etcd watch runs (1) or not (0).", "cluster_watching")
        gauge("cluster_members", "Cluster mode: etcd members configured.", "cluster_members")
        gauge("cluster_lag_seconds", "Cluster mode: how long this host's last change took from its commit to this host's copy.", "cluster_lag_us", microseconds: true)
        gauge("cluster_hosts_seen", "Cluster mode: other hosts whose changes this host has seen.", "cluster_hosts_seen")
        family("cluster_skew_max_seconds", "gauge", "Cluster mode: the largest estimated offset of another host's wall clock from this one's.", [
            Sample(key: "cluster_skew_max_ms", milliseconds: true),
        ])
        if let storage = values["storage"] {
            out += "# HELP countdownd_storage_ok Whether changes can be stored (0: changes are refused with ERR unavailable).\n"
            out += "# TYPE countdownd_storage_ok gauge\ncountdownd_storage_ok \(storage == "ok" ? 1 : 0)\n"
            handled.insert("storage")
        }
        if let member = values["cluster_member"] {
            out += "# HELP countdownd_cluster_member_info Cluster mode: the etcd member asked first.\n"
            out += "# TYPE countdownd_cluster_member_info gauge\ncountdownd_cluster_member_info{member=\"\(escaped(member))\"} 1\n"
            handled.insert("cluster_member")
        }
        for entry in stats where !handled.contains(entry.key) {
            guard let value = Int64(entry.value), entry.key.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }) else { continue }
            out += "# HELP countdownd_\(entry.key) countdownd's STATS \(entry.key) (see docs/PROTOCOL.md).\n"
            out += "# TYPE countdownd_\(entry.key) gauge\ncountdownd_\(entry.key) \(value)\n"
        }
        if let version = values["version"] {
            out += "# HELP countdownd_build_info The daemon's version.\n# TYPE countdownd_build_info gauge\n"
            out += "countdownd_build_info{version=\"\(escaped(version))\"} 1\n"
        }
        return out
    }

    /// Microseconds as seconds, exactly: `447` is `0.000447`, `2000000` is `2`.
    static func seconds(microseconds: Int64) -> String {
        let sign = microseconds < 0 ? "-" : ""
        let magnitude = microseconds.magnitude
        let whole = magnitude / 1_000_000, fraction = magnitude % 1_000_000
        guard fraction > 0 else { return sign + String(whole) }
        var digits = String(fraction)
        digits = String(repeating: "0", count: 6 - digits.count) + digits
        while digits.hasSuffix("0") { digits.removeLast() }
        return "\(sign)\(whole).\(digits)"
    }

    /// A label value as the format wants it: backslash, quote and newline escaped.
    private static func escaped(_ text: String) -> String {
        text.replacing("\\", with: "\\\\").replacing("\"", with: "\\\"").replacing("\n", with: "\\n")
    }
}
