// Command otpcooldown is an OTP "resend code" endpoint: POST /send-code?phone=+4915112345678
// sends a code once, then answers 429 with Retry-After until the cooldown ends. One request to
// countdownd per click: the time left comes with the refusal.
//
//	go run ./examples/otpcooldown -listen 127.0.0.1:8080
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"strconv"
	"time"

	"countdownd"
)

const cooldown = 60 * time.Second

func sendCode(client *countdownd.Client) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		phone := r.URL.Query().Get("phone")
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		_, err := client.Start(ctx, "otp:"+phone, cooldown)
		var refusal *countdownd.Error
		switch {
		case err == nil:
			// ... send the SMS here ...
			fmt.Fprintln(w, "code sent")
		case errors.Is(err, countdownd.ErrBusy) && errors.As(err, &refusal):
			seconds := int(refusal.RetryAfter() / time.Second)
			w.Header().Set("Retry-After", strconv.Itoa(seconds))
			http.Error(w, fmt.Sprintf("Resend code in %d s", seconds), http.StatusTooManyRequests)
		case errors.Is(err, countdownd.ErrBadName):
			http.Error(w, "not a phone number", http.StatusBadRequest)
		case errors.Is(err, countdownd.ErrOutcomeUnknown):
			// The START may or may not have been made: never send a second code blindly.
			http.Error(w, "try again in a moment", http.StatusServiceUnavailable)
		default:
			log.Printf("send-code %s: %v", phone, err)
			http.Error(w, "try again in a moment", http.StatusServiceUnavailable)
		}
	}
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve on")
	flag.Parse()
	client := countdownd.NewLazy(countdownd.Options{}) // Connects on the first request.
	defer client.Close()
	http.HandleFunc("/send-code", sendCode(client))
	log.Fatal(http.ListenAndServe(*listen, nil))
}
