package countdownd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestBusyCarriesTheTimeLeft(t *testing.T) {
	line := parseLine("ERR busy 'otp:+49151' is running with 0:00:58 left; wait for it, CANCEL it, or START it with REPLACE remaining_ms=57814 state=running")
	if line.kind != lineErr {
		t.Fatalf("not an error line: %+v", line)
	}
	var err error = line.err
	if !errors.Is(err, ErrBusy) || errors.Is(err, ErrNotFound) {
		t.Fatalf("errors.Is: %v", err)
	}
	var refusal *Error
	if !errors.As(fmt.Errorf("wrapped: %w", err), &refusal) {
		t.Fatal("errors.As through a wrap")
	}
	if ms, ok := refusal.RemainingMS(); !ok || ms != 57814 {
		t.Fatalf("remaining %d %v", ms, ok)
	}
	if refusal.RetryAfter() != 58*time.Second {
		t.Fatalf("retry after %v", refusal.RetryAfter())
	}
	if refusal.Message != "'otp:+49151' is running with 0:00:58 left; wait for it, CANCEL it, or START it with REPLACE" {
		t.Fatalf("message %q", refusal.Message)
	}
}

func TestCallErrorsSayWhetherTheRequestMayHaveRun(t *testing.T) {
	sent := &CallError{Op: "START", MaybeApplied: true, Err: context.DeadlineExceeded}
	if !errors.Is(sent, ErrOutcomeUnknown) || !errors.Is(sent, context.DeadlineExceeded) {
		t.Fatal("a timed-out change is an unknown outcome and a deadline")
	}
	lost := &CallError{Op: "START", MaybeApplied: true, Err: &Error{Code: "outcome-unknown", Message: "closed"}}
	if errors.Is(lost, ErrConnectionLost) || !errors.Is(lost, ErrOutcomeUnknown) {
		t.Fatal("a change whose connection broke is an unknown outcome, never 'nothing was carried out'")
	}
	away := &CallError{Op: "START", Unreached: true, Err: context.DeadlineExceeded}
	if !errors.Is(away, ErrConnectionLost) || errors.Is(away, ErrOutcomeUnknown) {
		t.Fatal("a daemon that stayed away is a lost connection: nothing was sent")
	}
	read := &CallError{Op: "STATUS", Err: context.Canceled}
	if errors.Is(read, ErrOutcomeUnknown) || !errors.Is(read, context.Canceled) {
		t.Fatal("a cancelled read changed nothing")
	}
}

func TestLines(t *testing.T) {
	countdown := parseLine("COUNTDOWN tea running 2874 3000 1764488400000 1000 - pause-on-suspend")
	if countdown.kind != lineCountdown || countdown.countdown.Name != "tea" || countdown.countdown.RemainingMS != 2874 ||
		countdown.countdown.OwnerUID != 1000 || !countdown.countdown.PausesOnSuspend {
		t.Fatalf("%+v", countdown)
	}
	event := parseLine("EVENT 2 done tea 0 3000 1500 future-field")
	if event.kind != lineEvent || event.event.Seq != 2 || event.event.LateMS != 1500 || !event.event.Lifecycle() {
		t.Fatalf("%+v", event)
	}
	if parseLine("FUTURE something").kind != lineUnknown || parseLine("EVENT x").kind != lineUnknown {
		t.Fatal("unknown lines are ignored, not misread")
	}
	if seq, ok := subscribedSeq("subscribed all seq 41 events done"); !ok || seq != 41 {
		t.Fatal("subscribed seq")
	}
	if _, err := durationText(-time.Second); !errors.Is(err, ErrBadDuration) {
		t.Fatal("a negative duration is refused before it is sent")
	}
	if text, _ := durationText(1500 * time.Microsecond); text != "2ms" {
		t.Fatalf("rounded up to the millisecond: %s", text)
	}
	if err := checkName("two words"); !errors.Is(err, ErrBadName) {
		t.Fatal("a name with a space is refused before it is sent")
	}
}

func TestNoArgumentSmugglesASecondRequest(t *testing.T) {
	c := &conn{}
	for _, line := range []string{"LIST STATE running\nPING", "SUBSCRIBE EVENTS done\rPING", "STATUS a\x00b", "STATUS \xff"} {
		if _, err := c.request(context.Background(), "X", line, false); !errors.Is(err, ErrBadRequest) {
			t.Fatalf("%q: %v", line, err)
		}
	}
}

func TestCycleFieldsAreRead(t *testing.T) {
	line := parseLine("COUNTDOWN p running 2500 3000 1700000002500 1000 - - phase=1/2 label=work round=1/4")
	if line.kind != lineCountdown || line.countdown.Cycle == nil {
		t.Fatalf("no cycle: %+v", line)
	}
	if got := *line.countdown.Cycle; got != (CyclePosition{Phase: 1, Phases: 2, Label: "work", Round: 1, Rounds: 4}) || line.countdown.LateMS != 0 {
		t.Fatalf("cycle %+v, late %d", got, line.countdown.LateMS)
	}
	phase := parseLine("EVENT 9 phase p 1000 1000 1500 phase=2/2 round=3")
	if phase.kind != lineEvent || phase.event.LateMS != 1500 || phase.event.Cycle == nil || *phase.event.Cycle != (CyclePosition{Phase: 2, Phases: 2, Round: 3}) || !phase.event.Lifecycle() {
		t.Fatalf("phase event %+v", phase.event)
	}
	snapshot := parseLine("EVENT 8 snapshot p 2500 3000 running 17 1000 - phase=1/2 label=work")
	if snapshot.event.Cycle == nil || snapshot.event.Cycle.Label != "work" || snapshot.event.State != "running" {
		t.Fatalf("snapshot %+v", snapshot.event)
	}
	if changed := parseLine("EVENT 10 changed p 1000 1000 pause-on-suspend phase=2/2"); !changed.event.PausesOnSuspend || changed.event.Cycle == nil || changed.event.Cycle.Phase != 2 {
		t.Fatalf("changed %+v", changed.event)
	}
	if plain := parseLine("COUNTDOWN tea paused 5000 6000 - 1000"); plain.countdown.Cycle != nil {
		t.Fatal("a plain countdown has no cycle")
	}
}
