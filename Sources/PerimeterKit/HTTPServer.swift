@_exported import struct PerimeterHTTP.HTTPRequest
@_exported import class PerimeterHTTP.HTTPServer
@_exported import struct PerimeterHTTP.HTTPServerError
@_exported import class PerimeterHTTP.HTTPStream
@_exported import enum PerimeterHTTP.HTTPStreamChunk
@_exported import protocol PerimeterHTTP.HTTPStreamSource
