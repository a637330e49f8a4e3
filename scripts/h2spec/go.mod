// h2spec (HTTP/2 conformance, summerwind/h2spec) pinned with its
// dependencies, which its release does not pin: `make h2spec` installs it
// from here, and transport/h2grpc's TestH2spec runs it.
module github.com/sluicehq/sluice/scripts/h2spec

go 1.26.8

tool github.com/summerwind/h2spec/cmd/h2spec

require (
	github.com/fatih/color v1.19.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	github.com/summerwind/h2spec v2.2.1+incompatible // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
