import CLinuxShims

/// CRC-32C (Castagnoli), the checksum of every journal frame: it catches torn and bit-rotted
/// writes. With the processor's CRC-32C instruction where it has one (SSE 4.2 on x86-64: every
/// frame of every batch is summed, so this is on the hot path); otherwise
/// table-driven, eight bytes per step ("slicing by 8"). Both give the same value (tested).
enum CRC32C {
    /// Whether the processor's instruction is used: asked once.
    static let usesInstruction = countdownd_crc32c_has_instruction() != 0

    private static let tables: [[UInt32]] = {
        var tables = [[UInt32]](repeating: [UInt32](repeating: 0, count: 256), count: 8)
        for index in 0..<256 {
            var crc = UInt32(index)
            for _ in 0..<8 {
                crc = crc & 1 == 1 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1
            }
            tables[0][index] = crc
        }
        for index in 0..<256 {
            for slice in 1..<8 {
                let previous = tables[slice - 1][index]
                tables[slice][index] = (previous >> 8) ^ tables[0][Int(previous & 0xFF)]
            }
        }
        return tables
    }()

    /// The checksum of `bytes`.
    static func checksum(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        guard usesInstruction else { return tableChecksum(bytes) }
        guard let base = bytes.baseAddress else { return 0 }  // The checksum of nothing.
        return countdownd_crc32c_update(0xFFFF_FFFF, base, bytes.count) ^ 0xFFFF_FFFF
    }

    /// The checksum of `bytes`, from the tables alone: where the processor has no instruction,
    /// and to check the instruction's answers against.
    static func tableChecksum(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        var index = 0
        let count = bytes.count
        tables.withUnsafeBufferPointer { tables in
            let t0 = tables[0], t1 = tables[1], t2 = tables[2], t3 = tables[3]
            let t4 = tables[4], t5 = tables[5], t6 = tables[6], t7 = tables[7]
            while count - index >= 8 {
                let low = crc ^ (UInt32(bytes[index]) | UInt32(bytes[index + 1]) << 8
                    | UInt32(bytes[index + 2]) << 16 | UInt32(bytes[index + 3]) << 24)
                crc = t7[Int(low & 0xFF)] ^ t6[Int((low >> 8) & 0xFF)] ^ t5[Int((low >> 16) & 0xFF)] ^ t4[Int(low >> 24)]
                    ^ t3[Int(bytes[index + 4])] ^ t2[Int(bytes[index + 5])] ^ t1[Int(bytes[index + 6])] ^ t0[Int(bytes[index + 7])]
                index += 8
            }
            while index < count {
                crc = (crc >> 8) ^ t0[Int((crc ^ UInt32(bytes[index])) & 0xFF)]
                index += 1
            }
        }
        return crc ^ 0xFFFF_FFFF
    }

    /// The checksum of `bytes`.
    static func checksum(_ bytes: [UInt8]) -> UInt32 {
        bytes.withUnsafeBytes { checksum($0) }
    }
}
