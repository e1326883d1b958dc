module github.com/kevgo/kev

go 1.26.0

require (
	github.com/klauspost/compress v1.20.4
	github.com/x448/float16 v0.8.4
	golang.org/x/text v0.44.0
	gorgonia.org/cu v0.9.6
)

require (
	github.com/google/uuid v1.1.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
