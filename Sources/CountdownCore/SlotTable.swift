/// The engine's records by slot, kept in pages of 4,096 that never move once allocated.
///
/// Why not one array: an array that outgrows its storage copies everything into a new, untouched
/// allocation. At 65,536 countdowns that is several megabytes copied and a page fault for every
/// 4 KiB of the copy, a stall of milliseconds on the daemon's only queue, measured as a spike of
/// tick lateness in the benchmark. Here growing adds one page; nothing is copied.
struct SlotTable<Element>: Sequence {
    private static var pageShift: Int { 12 }
    private static var pageSize: Int { 1 << pageShift }

    private var pages: [[Element?]] = []
    /// How many slots exist (occupied or empty).
    private(set) var count = 0

    /// The element in `slot`, or `nil` for an empty slot.
    subscript(slot: Int) -> Element? {
        get { pages[slot >> Self.pageShift][slot & (Self.pageSize - 1)] }
        set { pages[slot >> Self.pageShift][slot & (Self.pageSize - 1)] = newValue }
    }

    /// Adds a slot holding `element`; it is slot `count - 1` afterwards.
    mutating func append(_ element: Element?) {
        if count & (Self.pageSize - 1) == 0 {
            var page: [Element?] = []
            page.reserveCapacity(Self.pageSize)
            pages.append(page)
        }
        pages[count >> Self.pageShift].append(element)
        count += 1
    }

    /// Every slot, empty ones as `nil`, in slot order.
    func makeIterator() -> FlattenSequence<[[Element?]]>.Iterator {
        pages.joined().makeIterator()
    }
}

extension SlotTable: Sendable where Element: Sendable {}
