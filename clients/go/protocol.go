package countdownd

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Countdown is a countdown as a reply describes it (OK after a change, COUNTDOWN of STATUS and LIST).
type Countdown struct {
	Name            string
	State           string // running, paused, done or cancelled
	RemainingMS     int64
	TotalMS         int64
	DeadlineUnixMS  int64          // 0 unless running
	OwnerUID        int64          // -1 when not given
	LateMS          int64          // a done delivered more than a second late; 0 otherwise
	Pinned          bool           // counts down to a wall-clock time (START … AT)
	PausesOnSuspend bool           // stands still while the machine sleeps
	Cycle           *CyclePosition // a cycle of phases (START … CYCLE); nil for a plain countdown
}

// CyclePosition is where a cycle of phases is: its `phase=`, `label=` and `round=` fields.
type CyclePosition struct {
	Phase  int    // the running phase, from 1
	Phases int    // how many phases a round has
	Label  string // the running phase's label, if it has one
	Round  int    // the running round, from 1, when it repeats; 0 otherwise
	Rounds int    // how many rounds, when it repeats a number of times; 0 otherwise (for ever, or once)
}

// Finished reports whether the countdown is done or cancelled.
func (c Countdown) Finished() bool { return c.State == "done" || c.State == "cancelled" }

// Event is `EVENT <seq> <kind> <name> <remaining_ms> <total_ms> …`: something that happened.
type Event struct {
	Seq         int64
	Kind        string // started, paused, resumed, extended, done, cancelled, removed, phase, changed, tick, snapshot
	Name        string
	RemainingMS int64
	TotalMS     int64
	LateMS      int64  // done and phase only
	State       string // snapshot only
	Suspend     bool   // paused or resumed because the machine slept
	// PausesOnSuspend is a changed event's new setting (SET … ON-SUSPEND): true for pause.
	PausesOnSuspend bool
	Cycle           *CyclePosition // a cycle's countdown (for phase: the phase that began); nil otherwise
}

// Lifecycle reports whether the event is numbered by its own Seq (ticks and snapshots carry
// the last lifecycle number).
func (e Event) Lifecycle() bool { return e.Kind != "tick" && e.Kind != "snapshot" }

// DefaultSocketPath is where the user's own daemon listens ($COUNTDOWND_SOCKET, else the
// runtime directory's); a server that uses the system daemon passes /run/countdownd/countdownd.sock.
func DefaultSocketPath() string {
	if path := os.Getenv("COUNTDOWND_SOCKET"); path != "" {
		return path
	}
	if runtime := os.Getenv("XDG_RUNTIME_DIR"); runtime != "" {
		return runtime + "/countdownd/countdownd.sock"
	}
	if os.Getuid() == 0 {
		return "/run/countdownd/countdownd.sock"
	}
	return fmt.Sprintf("/tmp/countdownd-%d/countdownd.sock", os.Getuid())
}

// lineKind classifies a line from the daemon.
type lineKind int

const (
	lineUnknown lineKind = iota
	lineHello
	lineOK
	lineErr
	lineCountdown
	lineEvent
	lineStat
	lineShutdown
)

type line struct {
	kind      lineKind
	text      string // OK's text, SHUTDOWN's reason, HELLO's daemon version
	err       *Error
	countdown Countdown
	event     Event
	statKey   string
	statValue string
}

func parseLine(raw string) line {
	raw = strings.TrimSuffix(raw, "\r")
	head, rest, _ := strings.Cut(raw, " ")
	words := strings.Fields(rest)
	switch head {
	case "OK":
		return line{kind: lineOK, text: rest}
	case "ERR":
		if len(words) == 0 {
			break
		}
		code, text, _ := strings.Cut(rest, " ")
		return line{kind: lineErr, err: errorFrom(code, text)}
	case "EVENT":
		if event, ok := parseEvent(words); ok {
			return line{kind: lineEvent, event: event}
		}
	case "COUNTDOWN":
		if countdown, ok := parseCountdown(words); ok {
			return line{kind: lineCountdown, countdown: countdown}
		}
	case "STAT":
		if len(words) > 0 {
			key, value, _ := strings.Cut(rest, " ")
			return line{kind: lineStat, statKey: key, statValue: value}
		}
	case "HELLO":
		if len(words) >= 2 && words[0] == "countdownd" {
			version := ""
			if len(words) > 2 {
				version = words[2]
			}
			return line{kind: lineHello, text: version}
		}
	case "SHUTDOWN":
		return line{kind: lineShutdown, text: rest}
	}
	return line{kind: lineUnknown, text: raw}
}

func number(word string) (int64, bool) {
	value, err := strconv.ParseInt(word, 10, 64)
	return value, err == nil
}

// parseCountdown reads `<name> <state> <remaining_ms> <total_ms> <deadline|-> [<owner_uid> [<late_ms>|-] [at|pause-on-suspend]]`.
func parseCountdown(words []string) (Countdown, bool) {
	if len(words) < 5 {
		return Countdown{}, false
	}
	remaining, ok1 := number(words[2])
	total, ok2 := number(words[3])
	if !ok1 || !ok2 {
		return Countdown{}, false
	}
	countdown := Countdown{Name: words[0], State: words[1], RemainingMS: remaining, TotalMS: total, OwnerUID: -1}
	countdown.DeadlineUnixMS, _ = number(words[4])
	if len(words) > 5 {
		if uid, ok := number(words[5]); ok {
			countdown.OwnerUID = uid
		}
	}
	if len(words) > 6 {
		countdown.LateMS, _ = number(words[6])
	}
	if len(words) > 7 {
		countdown.Pinned = words[7] == "at"
		countdown.PausesOnSuspend = words[7] == "pause-on-suspend"
	}
	if len(words) > 8 {
		countdown.Cycle = parseCycle(words[8:])
	}
	return countdown, true
}

// parseCycle reads a cycle's `phase=<n>/<count>`, `label=` and `round=<n>[/<rounds>]` fields
// among words; nil without `phase=`.
func parseCycle(words []string) *CyclePosition {
	var position CyclePosition
	found := false
	for _, word := range words {
		key, value, _ := strings.Cut(word, "=")
		current, count, _ := strings.Cut(value, "/")
		switch key {
		case "phase":
			phase, ok1 := number(current)
			phases, ok2 := number(count)
			if ok1 && ok2 {
				position.Phase, position.Phases, found = int(phase), int(phases), true
			}
		case "label":
			position.Label = value
		case "round":
			if round, ok := number(current); ok {
				position.Round = int(round)
				rounds, _ := number(count)
				position.Rounds = int(rounds)
			}
		}
	}
	if !found {
		return nil
	}
	return &position
}

func parseEvent(words []string) (Event, bool) {
	if len(words) < 5 {
		return Event{}, false
	}
	seq, ok1 := number(words[0])
	remaining, ok2 := number(words[3])
	total, ok3 := number(words[4])
	if !ok1 || !ok2 || !ok3 {
		return Event{}, false
	}
	event := Event{Seq: seq, Kind: words[1], Name: words[2], RemainingMS: remaining, TotalMS: total}
	if len(words) > 5 {
		switch event.Kind {
		case "snapshot":
			event.State = words[5]
		case "done", "phase":
			event.LateMS, _ = number(words[5])
		case "paused", "resumed":
			event.Suspend = words[5] == "suspend"
		case "changed":
			event.PausesOnSuspend = words[5] == "pause-on-suspend"
		}
	}
	// A snapshot's cycle fields follow its state, deadline, owner and marker; others' the
	// optional field's place.
	if event.Kind == "snapshot" && len(words) > 9 {
		event.Cycle = parseCycle(words[9:])
	} else if event.Kind != "snapshot" && len(words) > 6 {
		event.Cycle = parseCycle(words[6:])
	}
	return event, true
}

// checkName refuses what would break the line protocol before it is sent; the daemon checks
// the rest of the naming rules.
func checkName(name string) error {
	if name == "" || strings.IndexFunc(name, unicode.IsSpace) >= 0 {
		return &Error{Code: "bad-name", Message: fmt.Sprintf("a countdown name is one word, such as tea or otp:+4915112345678: %q", name)}
	}
	return nil
}

// durationText is a duration as the protocol takes it: whole milliseconds.
func durationText(d time.Duration) (string, error) {
	if d <= 0 {
		return "", &Error{Code: "bad-duration", Message: fmt.Sprintf("a duration must be more than zero, not %v", d)}
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return strconv.FormatInt(int64(ms), 10) + "ms", nil
}

func subscribeLine(names []string, prefix string, kinds []string, since int64, hasSince bool) (string, error) {
	words := []string{"SUBSCRIBE"}
	if prefix != "" && len(names) > 0 {
		return "", &Error{Code: "bad-request", Message: "follow names or a prefix, not both, on one subscription"}
	}
	if prefix != "" {
		if err := checkName(prefix); err != nil {
			return "", err
		}
		words = append(words, "PREFIX", prefix)
	}
	for _, name := range names {
		if err := checkName(name); err != nil {
			return "", err
		}
		words = append(words, name)
	}
	if len(kinds) > 0 {
		words = append(words, "EVENTS", strings.Join(kinds, ","))
	}
	if hasSince {
		words = append(words, "SINCE", strconv.FormatInt(since, 10))
	}
	return strings.Join(words, " "), nil
}

// subscribedSeq is the seq of `OK subscribed <what> seq <seq> …`.
func subscribedSeq(text string) (int64, bool) {
	words := strings.Fields(text)
	for i := 0; i+1 < len(words); i++ {
		if words[i] == "seq" {
			return number(words[i+1])
		}
	}
	return 0, false
}
