package main

import (
	"flag"
	"io"
	"log/slog"
	"strings"
)

// logConfig is how a command logs: -log-format and -log-level, defaulting to KEV_LOG_FORMAT and KEV_LOG_LEVEL.
type logConfig struct {
	format, level string
	lvl           slog.Level
}

// register adds -log-format and -log-level to fs, with defaults from the environment.
func (l *logConfig) register(fs *flag.FlagSet, getenv func(string) string) {
	format, level := getenv("KEV_LOG_FORMAT"), getenv("KEV_LOG_LEVEL")
	if format == "" {
		format = "text"
	}
	if level == "" {
		level = "info"
	}
	fs.StringVar(&l.format, "log-format", format, "log format on standard error: text (key=value lines) or json (one object a line) (KEV_LOG_FORMAT)")
	fs.StringVar(&l.level, "log-level", level, "least severe level logged: debug, info, warn or error (KEV_LOG_LEVEL)")
}

// check validates the flags' values.
func (l *logConfig) check() error {
	switch strings.ToLower(l.format) {
	case "text", "json":
	default:
		return usagef("-log-format %q: want text or json", l.format)
	}
	if err := l.lvl.UnmarshalText([]byte(l.level)); err != nil {
		return usagef("-log-level %q: want debug, info, warn or error", l.level)
	}
	return nil
}

// logger returns the logger the flags describe, writing to w. Call check first.
func (l *logConfig) logger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: l.lvl}
	if strings.EqualFold(l.format, "json") {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
