// etcdfloor: etcd alone carrying a burst of deadlines in the shape cluster mode gives it, with
// no countdownd in the way: what the burst costs etcd, the floor under bench/clusterburst.py.
//
//	etcdfloor -endpoints A,B,C -count N -first UNIX_MS -value-bytes B -prefix /floor/
//
// One writer per endpoint, each owning every len(endpoints)-th key (as each host proposes the
// dones of the countdowns it wrote), each at its member (as each host talks to its first).
// Key i falls due at first + i*1000/N ms: all within one second. A writer wakes at the next
// due key, takes every key due by then, and writes them in transactions of at most 128
// operations (etcd's default --max-txn-ops), each a compare that the key is absent and a put of
// a value of B bytes, with at most two transactions in flight (as GroupCommit), through the
// JSON gateway (/v3/kv/txn) the daemon uses. One watcher per endpoint reads every change under
// the prefix through the gateway's watch (/v3/watch), as each host's replica does.
//
// Prints one line per watcher: "watcher I: SEEN of N, p50 P99 MAX ms", where lateness is when
// the watcher read a key's change minus the key's due instant (CLOCK_REALTIME). Exits 1 if a
// watcher did not see every key within 120 s of the last due instant.
package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

const maxOperations = 128
const maxInFlight = 2

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// prefixEnd is the end of the range of keys that start with prefix.
func prefixEnd(prefix string) string {
	b := []byte(prefix)
	b[len(b)-1]++
	return string(b)
}

func post(client *http.Client, endpoint, path string, body interface{}) (*http.Response, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	return client.Post(endpoint+path, "application/json", bytes.NewReader(data))
}

// revision asks endpoint for the current revision.
func revision(client *http.Client, endpoint string) (int64, error) {
	response, err := post(client, endpoint, "/v3/kv/range", map[string]string{"key": b64("/etcdfloor-probe")})
	if err != nil {
		return 0, err
	}
	defer response.Body.Close()
	var answer struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	if err := json.NewDecoder(response.Body).Decode(&answer); err != nil {
		return 0, err
	}
	var rev int64
	_, err = fmt.Sscan(answer.Header.Revision, &rev)
	return rev, err
}

type watchLine struct {
	Result *struct {
		Created bool `json:"created"`
		Events  []struct {
			Kv struct {
				Key string `json:"key"`
			} `json:"kv"`
		} `json:"events"`
	} `json:"result"`
}

// watch reads every change under prefix after rev from endpoint, noting when each key was
// first read, until count keys were seen or the deadline passed; ready is closed once the
// watch is created.
func watch(endpoint, prefix string, rev int64, count int, giveUp time.Time, ready chan<- struct{}, seen map[string]time.Time) error {
	client := &http.Client{}
	response, err := post(client, endpoint, "/v3/watch", map[string]interface{}{
		"create_request": map[string]interface{}{"key": b64(prefix), "range_end": b64(prefixEnd(prefix)), "start_revision": rev + 1},
	})
	if err != nil {
		return err
	}
	defer response.Body.Close()
	go func() {
		time.Sleep(time.Until(giveUp))
		response.Body.Close()
	}()
	reader := bufio.NewReaderSize(response.Body, 1<<20)
	decoder := json.NewDecoder(reader)
	created := false
	for len(seen) < count {
		var line watchLine
		if err := decoder.Decode(&line); err != nil {
			if err == io.EOF {
				return fmt.Errorf("the watch ended")
			}
			return err
		}
		now := time.Now()
		if line.Result == nil {
			continue
		}
		if line.Result.Created && !created {
			created = true
			close(ready)
		}
		for _, event := range line.Result.Events {
			key, err := base64.StdEncoding.DecodeString(event.Kv.Key)
			if err != nil {
				return err
			}
			if _, ok := seen[string(key)]; !ok {
				seen[string(key)] = now
			}
		}
	}
	return nil
}

// write sends keys (each due at its instant) to endpoint as they fall due.
func write(endpoint string, keys []string, due []time.Time, value string, failures chan<- error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: maxInFlight, MaxConnsPerHost: maxInFlight}}
	finished := make(chan struct{}, maxInFlight)
	inFlight := 0
	next := 0
	var pending []string
	for next < len(keys) || len(pending) > 0 || inFlight > 0 {
		now := time.Now()
		for next < len(keys) && !due[next].After(now) {
			pending = append(pending, keys[next])
			next++
		}
		for inFlight < maxInFlight && len(pending) > 0 {
			n := len(pending)
			if n > maxOperations {
				n = maxOperations
			}
			group := pending[:n]
			pending = pending[n:]
			inFlight++
			go func(group []string) {
				compares := make([]map[string]interface{}, len(group))
				puts := make([]map[string]interface{}, len(group))
				for i, key := range group {
					compares[i] = map[string]interface{}{"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}
					puts[i] = map[string]interface{}{"request_put": map[string]string{"key": b64(key), "value": value}}
				}
				response, err := post(client, endpoint, "/v3/kv/txn", map[string]interface{}{"compare": compares, "success": puts})
				if err == nil {
					var answer struct {
						Succeeded bool `json:"succeeded"`
					}
					err = json.NewDecoder(response.Body).Decode(&answer)
					response.Body.Close()
					if err == nil && !answer.Succeeded {
						err = fmt.Errorf("a transaction's compare failed")
					}
				}
				if err != nil {
					failures <- err
				}
				finished <- struct{}{}
			}(group)
		}
		// Wait for a transaction's answer, or the next due key.
		var wake <-chan time.Time
		if next < len(keys) {
			wake = time.After(time.Until(due[next]))
		}
		if inFlight == 0 && wake == nil {
			continue
		}
		select {
		case <-finished:
			inFlight--
		case <-wake:
		}
	}
}

func main() {
	endpointList := flag.String("endpoints", "", "comma-separated etcd client URLs")
	count := flag.Int("count", 10000, "keys in the burst")
	first := flag.Int64("first", 0, "Unix ms of the first due instant")
	valueBytes := flag.Int("value-bytes", 256, "bytes in each value")
	prefix := flag.String("prefix", "/etcdfloor/", "key prefix")
	flag.Parse()
	endpoints := strings.Split(*endpointList, ",")
	rev, err := revision(http.DefaultClient, endpoints[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdfloor: cannot read the revision:", err)
		os.Exit(2)
	}
	start := time.UnixMilli(*first)
	due := make([]time.Time, *count)
	for i := range due {
		due[i] = start.Add(time.Duration(int64(i)*1000/int64(*count)) * time.Millisecond)
	}
	giveUp := start.Add(121 * time.Second)
	seen := make([]map[string]time.Time, len(endpoints))
	errs := make([]error, len(endpoints))
	var watchers sync.WaitGroup
	for i, endpoint := range endpoints {
		seen[i] = make(map[string]time.Time, *count)
		ready := make(chan struct{})
		watchers.Add(1)
		go func(i int, endpoint string) {
			defer watchers.Done()
			errs[i] = watch(endpoint, *prefix, rev, *count, giveUp, ready, seen[i])
		}(i, endpoint)
		select {
		case <-ready:
		case <-time.After(10 * time.Second):
			fmt.Fprintln(os.Stderr, "etcdfloor: a watch was not created within 10 s")
			os.Exit(2)
		}
	}
	value := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("x"), *valueBytes))
	failures := make(chan error, 1024)
	var writers sync.WaitGroup
	for w, endpoint := range endpoints {
		var keys []string
		var when []time.Time
		for i := w; i < *count; i += len(endpoints) {
			keys = append(keys, fmt.Sprintf("%sb%d", *prefix, i))
			when = append(when, due[i])
		}
		writers.Add(1)
		go func(endpoint string, keys []string, when []time.Time) {
			defer writers.Done()
			write(endpoint, keys, when, value, failures)
		}(endpoint, keys, when)
	}
	writers.Wait()
	watchers.Wait()
	close(failures)
	failed := false
	for err := range failures {
		fmt.Fprintln(os.Stderr, "etcdfloor: a write failed:", err)
		failed = true
		break
	}
	for i := range endpoints {
		late := make([]float64, 0, len(seen[i]))
		for key, at := range seen[i] {
			var index int
			if _, err := fmt.Sscanf(strings.TrimPrefix(key, *prefix), "b%d", &index); err != nil || index >= *count {
				continue
			}
			late = append(late, float64(at.Sub(due[index]).Microseconds())/1000)
		}
		sort.Float64s(late)
		if len(late) == 0 {
			fmt.Printf("watcher %d: 0 of %d\n", i, *count)
			failed = true
			continue
		}
		at := func(q float64) float64 { // as bench/run.py's percentiles
			i := int(q * float64(len(late)))
			if i > len(late)-1 {
				i = len(late) - 1
			}
			return late[i]
		}
		fmt.Printf("watcher %d: %d of %d, p50 %.1f p99 %.1f max %.1f ms\n", i, len(late), *count, at(0.5), at(0.99), late[len(late)-1])
		if errs[i] != nil || len(late) != *count {
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}
