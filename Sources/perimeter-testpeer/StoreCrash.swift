enum StoreCrash { static func run() throws { fatalError("store-crash: the store is not built yet") } }
