package countdownd

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Error is the daemon's `ERR <code> <message>`, or one of this package's own failures
// (ErrConnectionLost, ErrOutcomeUnknown). Match a kind with errors.Is against the sentinels:
//
//	if errors.Is(err, countdownd.ErrBusy) { … }
//
// and read the details with errors.As:
//
//	var e *countdownd.Error
//	if errors.As(err, &e) { retry := e.RetryAfter() }
type Error struct {
	Code    string            // busy, not-found, bad-name, … (docs/PROTOCOL.md, Errors)
	Message string            // what went wrong and what to do, for a person
	Fields  map[string]string // details for programs, such as remaining_ms of a busy START
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "countdownd: " + e.Code
	}
	return "countdownd: " + e.Message + " (" + e.Code + ")"
}

// Is matches a sentinel of the same code: errors.Is(err, ErrBusy).
func (e *Error) Is(target error) bool {
	other, ok := target.(*Error)
	return ok && other.Message == "" && other.Code == e.Code
}

// RemainingMS is the time left of the countdown in the way of a busy START, when the daemon said.
func (e *Error) RemainingMS() (int64, bool) {
	value, ok := e.Fields["remaining_ms"]
	if !ok {
		return 0, false
	}
	ms, err := strconv.ParseInt(value, 10, 64)
	return ms, err == nil
}

// RetryAfter is the time until a busy name may start again, rounded up to whole seconds and at
// least one (what an HTTP 429 carries as Retry-After).
func (e *Error) RetryAfter() time.Duration {
	ms, ok := e.RemainingMS()
	if !ok || ms <= 0 {
		return time.Second
	}
	return time.Duration((ms+999)/1000) * time.Second
}

// The daemon's error codes, for errors.Is.
var (
	ErrBadRequest     = &Error{Code: "bad-request"}
	ErrUnknownCommand = &Error{Code: "unknown-command"}
	ErrBadName        = &Error{Code: "bad-name"}
	ErrBadDuration    = &Error{Code: "bad-duration"}
	ErrNotFound       = &Error{Code: "not-found"}
	ErrBusy           = &Error{Code: "busy"}
	ErrForbidden      = &Error{Code: "forbidden"}
	ErrLimit          = &Error{Code: "limit"}
	ErrLineTooLong    = &Error{Code: "line-too-long"}
	ErrOverflow       = &Error{Code: "overflow"}
	ErrUnavailable    = &Error{Code: "unavailable"} // not stored, so not made: try again later
	ErrGone           = &Error{Code: "gone"}        // SINCE: events after it are no longer kept

	// ErrConnectionLost: the daemon could not be reached before the context ended, or closed
	// the connection before the request was sent. Nothing was carried out.
	ErrConnectionLost = &Error{Code: "connection-lost"}
	// ErrOutcomeUnknown: the request was sent and its answer never came (the connection broke,
	// or the context ended first). It may or may not have been carried out: check with Status
	// before doing it again; never retry a Start blindly.
	ErrOutcomeUnknown = &Error{Code: "outcome-unknown"}
	// ErrProtocol: a line this client cannot read where it expected one it can.
	ErrProtocol = &Error{Code: "protocol-violation"}
)

// CallError is a call that ended without the daemon's answer: its context ended (Err is then
// context.DeadlineExceeded or context.Canceled, for errors.Is), or the connection broke. The
// connection it was on is closed, so its late answer can never be read as another call's.
type CallError struct {
	Op           string // the request's verb
	MaybeApplied bool   // the request was sent: a change may have been made
	Unreached    bool   // the daemon could not be reached before the context ended: nothing was sent
	Err          error
}

func (e *CallError) Error() string {
	applied := ""
	if e.MaybeApplied {
		applied = "; it may or may not have been carried out"
	}
	return "countdownd: " + e.Op + ": " + strings.TrimPrefix(e.Err.Error(), "countdownd: ") + applied
}

// Unwrap gives the context's error or the connection's.
func (e *CallError) Unwrap() error { return e.Err }

// Is matches ErrOutcomeUnknown when the request may have been carried out, and
// ErrConnectionLost when the daemon could not be reached (nothing was sent).
func (e *CallError) Is(target error) bool {
	return (target == ErrOutcomeUnknown && e.MaybeApplied) || (target == ErrConnectionLost && e.Unreached)
}

var field = regexp.MustCompile(`^([a-z_]+)=(\S*)$`)

// errorFrom is the error of `ERR <code> <text>`: its message, and the trailing key=value fields.
func errorFrom(code, text string) *Error {
	words := strings.Split(text, " ")
	fields := map[string]string{}
	for len(words) > 0 {
		match := field.FindStringSubmatch(words[len(words)-1])
		if match == nil {
			break
		}
		fields[match[1]] = match[2]
		words = words[:len(words)-1]
	}
	return &Error{Code: code, Message: strings.Join(words, " "), Fields: fields}
}

func lost(format string) *Error {
	return &Error{Code: "connection-lost", Message: format}
}

// isConnectionLost tells a broken connection from the daemon's own answers.
func isConnectionLost(err error) bool {
	return errors.Is(err, ErrConnectionLost)
}
