module countdownd

go 1.19
