extension PrivacyGate {
    /// A subject's usage marks, oldest first: almost always one (the phone's latest in-use
    /// state), kept inline. An array of one is a heap allocation of ~64 B, a subject's largest
    /// piece of privacy state (`bench restart`). Its snapshot forms (`Codable`'s and the binary
    /// one) are `[UsageMark]`'s, so snapshots read either.
    struct UsageMarks: Sendable, RandomAccessCollection {
        private enum Storage: Sendable {
            case one(UsageMark)
            /// None, or two or more.
            case many([UsageMark])
        }

        private var storage: Storage

        init(_ marks: [UsageMark]) {
            storage = marks.count == 1 ? .one(marks[0]) : .many(marks)
        }

        var startIndex: Int { 0 }

        var endIndex: Int {
            switch storage {
            case .one: 1
            case .many(let marks): marks.count
            }
        }

        subscript(position: Int) -> UsageMark {
            switch storage {
            case .one(let mark):
                precondition(position == 0, "index \(position) out of range of one usage mark")
                return mark
            case .many(let marks): return marks[position]
            }
        }

        var array: [UsageMark] {
            switch storage {
            case .one(let mark): [mark]
            case .many(let marks): marks
            }
        }
    }
}

extension PrivacyGate.UsageMarks: Codable {
    init(from decoder: any Decoder) throws {
        self.init(try [PrivacyGate.UsageMark](from: decoder))
    }

    func encode(to encoder: any Encoder) throws {
        try array.encode(to: encoder)
    }
}

extension PrivacyGate.UsageMarks: BinaryCodableCollection {
    func encodeBinary(into encoder: BinaryEncoding) throws { try encoder.writeElements(self, count: count) }

    static func decodeBinary(from decoder: BinaryDecoding) throws -> Self {
        Self(try [PrivacyGate.UsageMark].decodeBinary(from: decoder))
    }
}
