/// How late events came, since the daemon started: a log-linear histogram (four buckets per
/// power of two of microseconds), so recording is O(1) with no allocation, memory is fixed
/// (a few hundred counters), and a percentile is accurate to within 19 %.
public struct LatenessHistogram: Sendable, Equatable {
    private static let bucketsPerOctave = 4
    private static let octaves = 40  // Up to 2^40 µs: twelve days.
    /// Bucket 0 (0 µs), four per octave, and one for everything beyond.
    private var buckets = [UInt64](repeating: 0, count: bucketsPerOctave * octaves + 2)
    /// How many were recorded.
    public private(set) var count: UInt64 = 0
    /// The latest, in microseconds.
    public private(set) var maximumMicroseconds: Int64 = 0
    /// All of them added up, in microseconds (a summary's `_sum`).
    public private(set) var sumMicroseconds: Int64 = 0

    /// An empty histogram.
    public init() {}

    /// Records one lateness, in nanoseconds (early counts as 0).
    public mutating func record(nanoseconds: Int64) {
        let microseconds = max(0, nanoseconds / 1000)
        buckets[Self.bucket(of: microseconds)] += 1
        count += 1
        sumMicroseconds &+= microseconds
        maximumMicroseconds = max(maximumMicroseconds, microseconds)
    }

    /// The lateness at or under which `fraction` (0–1) of the events came, in microseconds: the
    /// upper edge of its bucket (never above the maximum seen). 0 when nothing was recorded.
    public func percentileMicroseconds(_ fraction: Double) -> Int64 {
        guard count > 0 else { return 0 }
        let rank = UInt64((Double(count) * min(max(fraction, 0), 1)).rounded(.up))
        var seen: UInt64 = 0
        for (index, bucketCount) in buckets.enumerated() {
            seen += bucketCount
            if seen >= max(rank, 1) {
                return min(Self.upperEdge(of: index), maximumMicroseconds)
            }
        }
        return maximumMicroseconds
    }

    /// Bucket 0 holds 0 µs; above, four per octave: [2^k, 2^k·1.19), [2^k·1.19, 2^k·1.41), …
    static func bucket(of microseconds: Int64) -> Int {
        guard microseconds > 0 else { return 0 }
        let octave = 63 - microseconds.leadingZeroBitCount
        guard octave < octaves else { return bucketsPerOctave * octaves + 1 }
        let base = Int64(1) << octave
        // Which quarter of the octave, linearly: good enough, and exact at powers of two.
        let quarter = Int((microseconds - base) * Int64(bucketsPerOctave) / base)
        return 1 + octave * bucketsPerOctave + quarter
    }

    /// The largest value that falls into bucket `index`.
    static func upperEdge(of index: Int) -> Int64 {
        guard index > 0 else { return 0 }
        let octave = (index - 1) / bucketsPerOctave
        let quarter = (index - 1) % bucketsPerOctave
        guard octave < octaves else { return .max }
        let base = Int64(1) << octave
        return base + (base * Int64(quarter + 1) + Int64(bucketsPerOctave) - 1) / Int64(bucketsPerOctave) - 1
    }
}
