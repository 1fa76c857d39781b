#if canImport(Glibc)
    import Glibc
#endif

/// Gives memory that was freed back to the system.
///
/// glibc's allocator keeps freed pages for reuse: after a snapshot was encoded or decoded (a
/// transient tree several times the snapshot's size) or a journal replayed, an evaluator's
/// resident size stayed at its high-water mark (1.6 GB for 100,000 subjects in `bench restart`,
/// against 375 MB of state). Called after such one-off peaks, never on the hot path.
public func returnFreedMemoryToSystem() {
    #if canImport(Glibc)
        // <malloc.h> is not in the Glibc module: looked up once (absent on other C libraries).
        _ = mallocTrim?(0)
    #endif
}

#if canImport(Glibc)
    private let mallocTrim: (@convention(c) (Int) -> Int32)? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int) -> Int32).self)
    }()
#endif
