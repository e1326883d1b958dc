module github.com/kevgo/kev

go 1.26.0

require github.com/x448/float16 v0.8.4

require (
	github.com/klauspost/compress v1.20.4 // indirect
	golang.org/x/text v0.44.0 // indirect
)
