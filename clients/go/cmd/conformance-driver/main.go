// Command conformance-driver puts the Go client behind the conformance suite's driver protocol
// (clients/conformance/README.md): JSON lines in on stdin, one reply line per command on stdout.
// A call's timeout_ms is its context's deadline.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"countdownd"
)

type command struct {
	ID        int64     `json:"id"`
	Op        string    `json:"op"`
	Socket    string    `json:"socket"`
	Method    string    `json:"method"`
	Name      string    `json:"name"`
	Duration  *string   `json:"duration"`
	Replace   bool      `json:"replace"`
	Cycle     string    `json:"cycle"`
	Repeat    any       `json:"repeat"`
	Prefix    string    `json:"prefix"`
	TimeoutMS *int64    `json:"timeout_ms"`
	Workers   int       `json:"workers"`
	Calls     []command `json:"calls"`
	Sub       string    `json:"sub"`
	Names     []string  `json:"names"`
	Kinds     []string  `json:"kinds"`
	Since     *int64    `json:"since"`
}

type countdownJSON struct {
	Name        string  `json:"name"`
	State       string  `json:"state"`
	RemainingMS int64   `json:"remaining_ms"`
	TotalMS     int64   `json:"total_ms"`
	Phase       int     `json:"phase,omitempty"`
	Phases      int     `json:"phases,omitempty"`
	Label       *string `json:"label,omitempty"`
	Round       *int    `json:"round,omitempty"`
}

func describe(c countdownd.Countdown) countdownJSON {
	described := countdownJSON{Name: c.Name, State: c.State, RemainingMS: c.RemainingMS, TotalMS: c.TotalMS}
	if c.Cycle != nil {
		described.Phase, described.Phases = c.Cycle.Phase, c.Cycle.Phases
		if c.Cycle.Label != "" {
			described.Label = &c.Cycle.Label
		}
		if c.Cycle.Round != 0 {
			described.Round = &c.Cycle.Round
		}
	}
	return described
}

func errorJSON(err error) map[string]any {
	described := map[string]any{"message": err.Error(), "maybe_applied": errors.Is(err, countdownd.ErrOutcomeUnknown)}
	var call *countdownd.CallError
	var daemon *countdownd.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		described["kind"] = "timeout"
	case errors.Is(err, context.Canceled):
		described["kind"] = "cancelled"
	case errors.As(err, &call) && call.MaybeApplied:
		described["kind"] = "outcome-unknown"
	case errors.As(err, &daemon):
		described["kind"] = daemon.Code
		if ms, ok := daemon.RemainingMS(); ok {
			described["remaining_ms"] = ms
		}
	default:
		described["kind"] = "not-a-countdownd-error"
	}
	return described
}

func outcome(value any, err error) map[string]any {
	if err != nil {
		return map[string]any{"error": errorJSON(err)}
	}
	return map[string]any{"ok": value}
}

type subscription struct {
	options   countdownd.SubscribeOptions
	timeout   *int64
	following *countdownd.Subscription
}

type driver struct {
	client        *countdownd.Client
	subscriptions map[string]*subscription
}

func contextFor(timeoutMS *int64) (context.Context, context.CancelFunc) {
	if timeoutMS == nil {
		return context.WithCancel(context.Background())
	}
	return context.WithTimeout(context.Background(), time.Duration(*timeoutMS)*time.Millisecond)
}

func (d *driver) call(c command) (any, error) {
	ctx, cancel := contextFor(c.TimeoutMS)
	defer cancel()
	var duration time.Duration
	if c.Duration != nil {
		parsed, err := time.ParseDuration(*c.Duration)
		if err != nil {
			return nil, &countdownd.Error{Code: "bad-duration", Message: err.Error()}
		}
		duration = parsed
	}
	var countdown countdownd.Countdown
	var err error
	switch c.Method {
	case "start":
		options := countdownd.StartOptions{Duration: duration, Replace: c.Replace, Cycle: c.Cycle}
		switch repeat := c.Repeat.(type) {
		case bool:
			options.RepeatForever = repeat
		case float64:
			options.Repeat = int(repeat)
		}
		countdown, err = d.client.StartWith(ctx, c.Name, options)
	case "skip":
		countdown, err = d.client.Skip(ctx, c.Name)
	case "status":
		countdown, err = d.client.Status(ctx, c.Name)
	case "cancel":
		countdown, err = d.client.Cancel(ctx, c.Name)
	case "pause":
		countdown, err = d.client.Pause(ctx, c.Name)
	case "resume":
		countdown, err = d.client.Resume(ctx, c.Name)
	case "remove":
		countdown, err = d.client.Remove(ctx, c.Name)
	case "extend":
		countdown, err = d.client.Extend(ctx, c.Name, duration)
	case "ping":
		return nil, d.client.Ping(ctx)
	case "list":
		countdowns, err := d.client.List(ctx, nil, c.Prefix)
		listed := []countdownJSON{}
		for _, each := range countdowns {
			listed = append(listed, describe(each))
		}
		return listed, err
	default:
		return nil, fmt.Errorf("unknown method %q", c.Method)
	}
	return describe(countdown), err
}

func (d *driver) handle(c command) (any, error) {
	switch c.Op {
	case "connect":
		client, err := countdownd.New(context.Background(), countdownd.Options{SocketPath: c.Socket})
		d.client = client
		return nil, err
	case "reset":
		for _, each := range d.subscriptions {
			if each.following != nil {
				each.following.Close()
			}
		}
		d.subscriptions = map[string]*subscription{}
		if d.client != nil {
			d.client.Close()
		}
		return nil, nil
	case "call":
		return d.call(c)
	case "storm":
		results := make([]map[string]any, len(c.Calls))
		var next int64 = -1
		var group sync.WaitGroup
		for worker := 0; worker < c.Workers; worker++ {
			group.Add(1)
			go func() {
				defer group.Done()
				for {
					index := atomic.AddInt64(&next, 1)
					if index >= int64(len(c.Calls)) {
						return
					}
					results[index] = outcome(d.call(c.Calls[index]))
				}
			}()
		}
		group.Wait()
		return results, nil
	case "wait":
		ctx, cancel := contextFor(c.TimeoutMS)
		defer cancel()
		countdown, err := d.client.Wait(ctx, c.Name)
		return describe(countdown), err
	case "subscribe":
		// Followed from the first next_event on, as a Python generator is.
		options := countdownd.SubscribeOptions{Names: c.Names, Prefix: c.Prefix, Kinds: c.Kinds}
		if c.Since != nil {
			options.Since, options.HasSince = *c.Since, true
		}
		d.subscriptions[c.Sub] = &subscription{options: options, timeout: c.TimeoutMS}
		return nil, nil
	case "next_event":
		each := d.subscriptions[c.Sub]
		ctx, cancel := contextFor(each.timeout)
		defer cancel()
		if each.following == nil {
			following, err := d.client.Subscribe(ctx, each.options)
			if err != nil {
				return nil, err
			}
			each.following = following
		}
		event, err := each.following.Next(ctx)
		return map[string]any{"seq": event.Seq, "kind": event.Kind, "name": event.Name,
			"remaining_ms": event.RemainingMS, "total_ms": event.TotalMS}, err
	case "close_sub":
		if each := d.subscriptions[c.Sub]; each != nil && each.following != nil {
			each.following.Close()
		}
		delete(d.subscriptions, c.Sub)
		return nil, nil
	}
	return nil, fmt.Errorf("unknown op %q", c.Op)
}

func main() {
	out := json.NewEncoder(os.Stdout)
	var writing sync.Mutex
	reply := func(id int64, body map[string]any) {
		body["id"] = id
		writing.Lock()
		defer writing.Unlock()
		if err := out.Encode(body); err != nil {
			os.Exit(1) // The harness is gone.
		}
	}
	reply(0, map[string]any{"hello": "go", "capabilities": []string{"requests", "timeouts", "shared", "reconnect", "wait", "subscribe", "cycles"}})
	d := &driver{subscriptions: map[string]*subscription{}}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<26) // A storm's calls come as one line.
	var background sync.WaitGroup
	for in.Scan() {
		var c command
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			fmt.Fprintln(os.Stderr, "conformance-driver: unreadable command:", err)
			os.Exit(2)
		}
		if c.Op == "wait" {
			background.Add(1)
			go func() { // Answered later; the harness goes on meanwhile.
				defer background.Done()
				reply(c.ID, outcome(d.handle(c)))
			}()
			continue
		}
		reply(c.ID, outcome(d.handle(c)))
	}
	background.Wait()
}
