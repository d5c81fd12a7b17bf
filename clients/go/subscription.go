package countdownd

import (
	"context"
	"errors"
)

// SubscribeOptions say what a subscription follows: Names, or every countdown whose name starts
// with Prefix, or everything (neither).
type SubscribeOptions struct {
	Names  []string
	Prefix string
	// Kinds limits the events ("done", "lifecycle", "tick", …); by default all, with a snapshot
	// of each running or paused countdown first.
	Kinds []string
	// Since replays the lifecycle events after this seq instead of snapshots (HasSince set).
	Since    int64
	HasSince bool
	// NoReconnect makes a lost connection an error instead of being taken up again.
	NoReconnect bool
}

// Subscription is a stream of events on a connection of its own, for one goroutine.
//
// A lost connection (a daemon restart) is taken up again with SINCE the last lifecycle event
// seen, so none is missed or repeated; if the daemon no longer keeps that far back, it
// subscribes afresh and the current state comes as snapshot events, or, when the subscription
// takes no snapshots, Next fails with ErrGone rather than skip events silently.
type Subscription struct {
	client   *Client
	options  SubscribeOptions
	follower *conn
	lastSeq  int64
	hasSeq   bool
	resumed  bool
	closed   bool
}

// Subscribe starts following within ctx (the first connection and its SUBSCRIBE); later
// reconnections happen in Next, within Next's context.
func (c *Client) Subscribe(ctx context.Context, options SubscribeOptions) (*Subscription, error) {
	subscription := &Subscription{client: c, options: options, lastSeq: options.Since, hasSeq: options.HasSince}
	if _, err := subscribeLine(options.Names, options.Prefix, options.Kinds, 0, false); err != nil {
		return nil, err
	}
	if err := subscription.follow(ctx); err != nil {
		return nil, err
	}
	return subscription, nil
}

func (s *Subscription) wantsSnapshots() bool {
	if len(s.options.Kinds) == 0 {
		return true
	}
	for _, kind := range s.options.Kinds {
		if kind == "snapshot" || kind == "all" {
			return true
		}
	}
	return false
}

// follow connects and subscribes, from lastSeq when there is one.
func (s *Subscription) follow(ctx context.Context) error {
	var follower *conn
	var err error
	if s.options.NoReconnect {
		follower, err = dial(ctx, s.client.path)
	} else {
		follower, err = s.client.connect(ctx, "SUBSCRIBE")
	}
	if err != nil {
		return err
	}
	line, _ := subscribeLine(s.options.Names, s.options.Prefix, s.options.Kinds, s.lastSeq, s.hasSeq)
	result, err := follower.request(ctx, "SUBSCRIBE", line, false)
	if err != nil && s.resumed && s.hasSeq && s.wantsSnapshots() && (errors.Is(err, ErrGone) || errors.Is(err, ErrBadRequest)) {
		// Not kept that far back, or a daemon whose history never had it (its state was
		// replaced): afresh, the current state as snapshots. Only on a reconnect, and only
		// where snapshots were asked for, so that a gap is never silent.
		line, _ = subscribeLine(s.options.Names, s.options.Prefix, s.options.Kinds, 0, false)
		result, err = follower.request(ctx, "SUBSCRIBE", line, false)
		s.hasSeq = false
	}
	if err != nil {
		follower.close()
		return err
	}
	if !s.hasSeq {
		s.lastSeq, s.hasSeq = subscribedSeq(result.text)
	}
	s.follower = follower
	return nil
}

// Next is the next event, waiting until ctx ends (an error wrapping ctx.Err(); the
// subscription stays usable). A lost connection is taken up again within ctx.
func (s *Subscription) Next(ctx context.Context) (Event, error) {
	for {
		if s.closed {
			return Event{}, lost("the subscription is closed")
		}
		if s.follower == nil {
			if err := s.follow(ctx); err != nil {
				return Event{}, err
			}
		}
		event, err := s.follower.nextEvent(ctx)
		if err == nil {
			if event.Lifecycle() {
				s.lastSeq, s.hasSeq = event.Seq, true
			}
			return event, nil
		}
		if ctx.Err() != nil || s.options.NoReconnect || !(isConnectionLost(err) || errors.Is(err, ErrOverflow)) {
			return Event{}, err
		}
		// Lost, or cut off for falling behind (ErrOverflow): SINCE brings what was missed.
		s.follower.close()
		s.follower, s.resumed = nil, true
	}
}

// Close ends the subscription.
func (s *Subscription) Close() error {
	s.closed = true
	if s.follower != nil {
		s.follower.close()
	}
	return nil
}
