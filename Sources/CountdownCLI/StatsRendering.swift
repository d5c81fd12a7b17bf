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

    /// Prometheus's text exposition format: gauges, counters with `_total`, lateness as a summary
    /// in seconds. Unknown keys from a newer daemon become gauges if numeric, and are skipped if not.
    public static func prometheus(_ stats: [StatEntry]) -> String {
        let values = Dictionary(stats.map { ($0.key, $0.value) }, uniquingKeysWith: { first, _ in first })
        var out = ""
        var handled: Set<String> = []
        func metric(_ name: String, _ type: String, _ help: String, _ samples: [(labels: String, key: String, scale: Double)]) {
            let present = samples.filter { values[$0.key].flatMap(Double.init) != nil }
            guard !present.isEmpty else { return }
            out += "# HELP countdownd_\(name) \(help)\n# TYPE countdownd_\(name) \(type)\n"
            for sample in present {
                // Filtered above: each key has a numeric value.
                let value = Double(values[sample.key]!)! * sample.scale
                out += "countdownd_\(name)\(sample.labels) \(format(value))\n"
                handled.insert(sample.key)
            }
        }
        metric("countdowns", "gauge", "Countdowns held, by state.", [
            ("{state=\"running\"}", "running", 1), ("{state=\"paused\"}", "paused", 1), ("{state=\"finished\"}", "finished", 1),
        ])
        metric("connections", "gauge", "Client connections.", [("", "connections", 1)])
        metric("subscribers", "gauge", "Connections subscribed to events.", [("", "subscribers", 1)])
        metric("subscribers_behind", "gauge", "Subscribers sent no ticks for now, for being more than 64 KiB behind.", [("", "subscribers_behind", 1)])
        metric("uptime_seconds", "gauge", "Seconds since the daemon started.", [("", "uptime_s", 1)])
        metric("last_seq", "gauge", "Number of the last lifecycle event.", [("", "last_seq", 1)])
        let kinds = stats.map(\.key).filter { $0.hasPrefix("events_") }
        metric("events_total", "counter", "Events emitted since start, by kind.", kinds.map {
            ("{kind=\"\($0.dropFirst("events_".count))\"}", $0, 1)
        })
        for event in ["done", "tick"] {
            metric("\(event)_lateness_seconds", "summary", "How late \(event) events went out after they were due.", [
                ("{quantile=\"0.5\"}", "\(event)_late_p50_us", 1e-6), ("{quantile=\"0.99\"}", "\(event)_late_p99_us", 1e-6),
                ("{quantile=\"1\"}", "\(event)_late_max_us", 1e-6), ("_count", "\(event)_late_count", 1),
            ])
        }
        metric("journal_bytes", "gauge", "Journal bytes written since the last snapshot.", [("", "journal_bytes", 1)])
        metric("batches_undone_total", "counter", "Batches undone because their storage commit failed.", [("", "batches_undone", 1)])
        metric("listing_slices_redone_total", "counter", "Listing slices produced again after their batch was undone.", [("", "listing_slices_redone", 1)])
        if let storage = values["storage"] {
            out += "# HELP countdownd_storage_ok Whether changes can be stored (0: changes are refused with ERR unavailable).\n"
            out += "# TYPE countdownd_storage_ok gauge\ncountdownd_storage_ok \(storage == "ok" ? 1 : 0)\n"
            handled.insert("storage")
        }
        for entry in stats where !handled.contains(entry.key) && entry.key != "version" {
            guard let value = Double(entry.value) else { continue }
            out += "# TYPE countdownd_\(entry.key) gauge\ncountdownd_\(entry.key) \(format(value))\n"
        }
        if let version = values["version"] {
            out += "# HELP countdownd_build_info The daemon's version.\n# TYPE countdownd_build_info gauge\n"
            out += "countdownd_build_info{version=\"\(version)\"} 1\n"
        }
        return out
    }

    private static func format(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }
}
