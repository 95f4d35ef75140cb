module fernbench/fasthttp

go 1.24.0

require github.com/valyala/fasthttp v1.69.0

require (
	github.com/andybalholm/brotli v1.2.0 // indirect
	github.com/klauspost/compress v1.18.2 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
)
