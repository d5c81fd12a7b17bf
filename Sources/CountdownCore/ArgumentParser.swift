/// A small table-driven command-line parser, shared by `countdownd` and `cdctl`.
///
/// What users expect of a Unix tool: options anywhere among the operands, `--opt value` and
/// `--opt=value` (split at the first `=`), `--` ends options, `-` alone is an operand, unknown
/// options are usage errors, repeated options are collected in order.
public struct ArgumentParser: Sendable {
    /// One option the parser knows.
    public struct Option: Sendable {
        /// Every spelling, e.g. `["--socket"]` or `["--help", "-h"]`.
        public var names: [String]
        /// Whether the option takes a value.
        public var takesValue: Bool
        /// The name its values are stored under (its first spelling without dashes).
        public var key: String

        /// Creates an option; `names.first` must be its long form.
        public init(_ names: [String], takesValue: Bool = false) {
            self.names = names
            self.takesValue = takesValue
            self.key = String(names[0].drop(while: { $0 == "-" }))
        }
    }

    /// What the command line said.
    public struct Result: Sendable, Equatable {
        /// Operands, in order.
        public var operands: [String] = []
        /// Values of each option given, by key, in order; flags have one empty string per use.
        public var values: [String: [String]] = [:]

        /// Whether a flag (or option) was given.
        public func has(_ key: String) -> Bool { values[key] != nil }

        /// The last value given for an option.
        public func value(_ key: String) -> String? { values[key]?.last }
    }

    /// A usage error, worded for a person.
    public enum Failure: Error, Equatable, CustomStringConvertible {
        /// An option the command does not have.
        case unknownOption(String)
        /// An option that needs a value got none.
        case missingValue(String)
        /// A flag was given a value with `=`.
        case unexpectedValue(String)

        public var description: String {
            switch self {
            case .unknownOption(let option): return "unknown option '\(option)'"
            case .missingValue(let option): return "option '\(option)' needs a value"
            case .unexpectedValue(let option): return "option '\(option)' takes no value"
            }
        }
    }

    private let optionsBySpelling: [String: Option]

    /// Creates a parser for a table of options.
    public init(options: [Option]) {
        var table: [String: Option] = [:]
        for option in options {
            for name in option.names {
                table[name] = option
            }
        }
        optionsBySpelling = table
    }

    /// Every spelling of every option, sorted.
    public var spellings: [String] {
        optionsBySpelling.keys.sorted()
    }

    /// The option spelled `spelling` (`--socket`), if there is one.
    public func option(spelled spelling: String) -> Option? {
        optionsBySpelling[spelling]
    }

    /// Parses arguments (without the program name).
    /// - Throws: `Failure` for an unknown option or a missing or unexpected value.
    public func parse(_ arguments: [String]) throws(Failure) -> Result {
        var result = Result()
        var iterator = arguments.makeIterator()
        var optionsEnded = false
        while let argument = iterator.next() {
            if optionsEnded || argument == "-" || !argument.hasPrefix("-") {
                result.operands.append(argument)
                continue
            }
            if argument == "--" {
                optionsEnded = true
                continue
            }
            let spelling: String
            var inlineValue: String?
            if argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") {
                spelling = String(argument[..<equals])
                inlineValue = String(argument[argument.index(after: equals)...])
            } else {
                spelling = argument
            }
            guard let option = optionsBySpelling[spelling] else {
                throw .unknownOption(spelling)
            }
            if option.takesValue {
                if let inlineValue {
                    result.values[option.key, default: []].append(inlineValue)
                } else if let next = iterator.next() {
                    result.values[option.key, default: []].append(next)
                } else {
                    throw .missingValue(spelling)
                }
            } else {
                if inlineValue != nil {
                    throw .unexpectedValue(spelling)
                }
                result.values[option.key, default: []].append("")
            }
        }
        return result
    }
}
