#!/usr/bin/env node
// An OTP "resend code" endpoint: POST /send-code?phone=+4915112345678 sends a code once, then
// answers 429 with Retry-After until the cooldown ends. One request to countdownd per click: the
// time left comes with the refusal.
//
//   node examples/otp-cooldown.js   (listens on 127.0.0.1:8080)
import http from 'node:http';
import { Busy, Client } from '../index.js';

const COOLDOWN_S = 60;
const client = new Client(); // Connects on the first request; shared by every request.

http.createServer(async (request, response) => {
  const phone = new URL(request.url, 'http://localhost').searchParams.get('phone') ?? '';
  try {
    await client.start(`otp:${phone}`, COOLDOWN_S, { timeout: 2000 });
    // ... send the SMS here ...
    response.end('code sent\n');
  } catch (error) {
    if (error instanceof Busy) {
      response.writeHead(429, { 'Retry-After': String(error.retryAfterS) });
      response.end(`Resend code in ${error.retryAfterS} s\n`);
    } else if (error.code === 'bad-name') {
      response.writeHead(400).end('not a phone number\n');
    } else {
      // outcome-unknown: the start may or may not have been made, so never send a second code blindly.
      response.writeHead(503).end('try again in a moment\n');
    }
  }
}).listen(8080, '127.0.0.1');
