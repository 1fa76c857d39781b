import Foundation
import PerimeterCore
import Testing

@testable import PerimeterCLI

@Suite("Lines")
struct LinesTests {
    @Test(
        "splits LF and CRLF input; a final newline ends the last line",
        arguments: [
            ("a\nb\n", ["a", "b"]),
            ("a\r\nb\r\n", ["a", "b"]),
            ("a\r\n\r\nb", ["a", "", "b"]),
            ("a\nb\r\nc", ["a", "b", "c"]),
            ("\n", [""]),
            ("", []),
            ("é\r\nü", ["é", "ü"]),
            ("a\rb", ["a\rb"]),
        ])
    func lines(text: String, expected: [String]) {
        let lines = Lines(data: Data(text.utf8)).map(String.init)
        #expect(lines == expected)
    }

    @Test("Lines split CRLF input (it used to split only where a lone LF was, leaving CRLF lines joined)")
    func crlfLinesWereJoined() {
        let lines = Lines(data: Data("lat,lon\r\n1,2\r\n3,4\r\n".utf8)).map(String.init)
        #expect(lines == ["lat,lon", "1,2", "3,4"])
    }
}
