/// Names in the order people expect: runs of digits compare as numbers, so `many2` comes before
/// `many10`; otherwise byte by byte (names are ASCII). Ties of equal value (`a01`, `a1`) fall
/// back to the bytes, so the order is total.
enum NaturalOrder {
    /// Whether `a` sorts before `b`.
    static func precedes(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8), y = Array(b.utf8)
        var i = 0, j = 0
        while i < x.count && j < y.count {
            if isDigit(x[i]) && isDigit(y[j]) {
                let startI = i, startJ = j
                while i < x.count && isDigit(x[i]) { i += 1 }
                while j < y.count && isDigit(y[j]) { j += 1 }
                // Compare the runs as numbers, without overflow: leading zeros off, then length, then digits.
                let runX = x[startI..<i].drop { $0 == UInt8(ascii: "0") }
                let runY = y[startJ..<j].drop { $0 == UInt8(ascii: "0") }
                if runX.count != runY.count { return runX.count < runY.count }
                if !runX.elementsEqual(runY) { return runX.lexicographicallyPrecedes(runY) }
            } else {
                if x[i] != y[j] { return x[i] < y[j] }
                i += 1
                j += 1
            }
        }
        if (x.count - i) != (y.count - j) { return x.count - i < y.count - j }
        return x.lexicographicallyPrecedes(y)
    }

    private static func isDigit(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }
}
