import Foundation
import PerimeterCLI

exit(await Perimeter.main())
