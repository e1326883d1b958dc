package server

import "time"

// Defaults of the HTTP server's limits (Options).
const (
	// DefaultBodyTimeout bounds reading a request body from the end of its header: a 32 MiB body at 0.5 MiB/s.
	DefaultBodyTimeout = time.Minute
	// DefaultReadHeaderTimeout bounds reading a request's header.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultFirstByteTimeout bounds the time from a new connection to its first byte.
	DefaultFirstByteTimeout = 5 * time.Second
	// DefaultMinBodyRate is the slowest a body may arrive after DefaultBodyRateGrace: 16 KiB/s.
	DefaultMinBodyRate = 16 << 10
	// DefaultBodyRateGrace is how long a body may take before the minimum rate applies.
	DefaultBodyRateGrace = 5 * time.Second
	// DefaultIdleTimeout closes an idle keep-alive connection; longer than common load balancers' 60 s, so that
	// they close first.
	DefaultIdleTimeout = 75 * time.Second
	// DefaultMaxHeaderBytes bounds the size of the request headers.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultMaxConns bounds the open connections.
	DefaultMaxConns = 1024
	// DefaultDrainGrace is how long the listener keeps answering 503 after a stop signal.
	DefaultDrainGrace = 5 * time.Second
	// DefaultDrainTimeout is how long Serve waits for requests in flight once the listener is closed.
	DefaultDrainTimeout = time.Minute
)

// withDefaults returns o with every 0 replaced by its default and every negative limit by 0 (none).
func (o Options) withDefaults() Options {
	dur := func(d *time.Duration, def time.Duration) {
		switch {
		case *d == 0:
			*d = def
		case *d < 0:
			*d = 0
		}
	}
	dur(&o.BodyTimeout, DefaultBodyTimeout)
	dur(&o.RetryAfter, DefaultRetryAfter)
	dur(&o.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	dur(&o.FirstByteTimeout, DefaultFirstByteTimeout)
	dur(&o.BodyRateGrace, DefaultBodyRateGrace)
	switch {
	case o.MinBodyRate == 0:
		o.MinBodyRate = DefaultMinBodyRate
	case o.MinBodyRate < 0:
		o.MinBodyRate = 0
	}
	dur(&o.IdleTimeout, DefaultIdleTimeout)
	dur(&o.DrainGrace, DefaultDrainGrace)
	dur(&o.DrainTimeout, DefaultDrainTimeout)
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	switch {
	case o.MaxInflightBytes == 0:
		o.MaxInflightBytes = DefaultMaxInflightBytes
	case o.MaxInflightBytes < 0:
		o.MaxInflightBytes = 0
	}
	if o.MaxInflightBytes > 0 && o.MaxInflightBytes < o.MaxBodyBytes {
		o.MaxInflightBytes = o.MaxBodyBytes
	}
	switch {
	case o.MaxInflightTokens == 0:
		o.MaxInflightTokens = DefaultMaxInflightTokens
	case o.MaxInflightTokens < 0:
		o.MaxInflightTokens = 0
	}
	if o.ClientShare <= 0 || o.ClientShare >= 1 {
		o.ClientShare = 0
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	switch {
	case o.MaxConns == 0:
		o.MaxConns = DefaultMaxConns
	case o.MaxConns < 0:
		o.MaxConns = 0
	}
	return o
}
