# fish completion for cdctl: commands, options, and live countdown names from the daemon.
# Names from the daemon the command line names with --socket, if it does.
function __cdctl_names
    set -l tokens (commandline -opc)
    set -l socket
    for index in (seq (count $tokens))
        switch $tokens[$index]
            case --socket
                set socket $tokens[(math $index + 1)]
            case '--socket=*'
                set socket (string replace -- --socket= '' $tokens[$index])
        end
    end
    if test -n "$socket"
        cdctl --socket $socket __complete names 2>/dev/null
    else
        cdctl __complete names 2>/dev/null
    end
end

set -l commands start status list cancel pause resume extend toggle skip set rm watch wait stats help
complete -c cdctl -f
complete -c cdctl -l socket -r -F -d 'the daemon socket'
complete -c cdctl -l no-color -d 'no colour'
complete -c cdctl -s v -l verbose -d 'say which socket was used'
complete -c cdctl -s h -l help -d 'show help'
complete -c cdctl -s V -l version -d 'show version'
complete -c cdctl -n "not __fish_seen_subcommand_from $commands" -a start -d 'start a countdown'
complete -c cdctl -n "not __fish_seen_subcommand_from $commands" -a status -d 'show countdowns'
complete -c cdctl -n "not __fish_seen_subcommand_from $commands" -a list -d 'list countdowns'
complete -c cdctl -n "not __fish_seen_subcommand_from $commands" -a cancel -d 'cancel a countdown'
complete -c cdctl -n "not __fish_seen_subcommand_from $commands" -a pause -d 'pause a countdown'
complete -c cdctl -n "not __fish_seen_subcommand_from $commands" -a resume -d 'resume a countdown'
complete -c cdctl -n "not __fish_seen_subcommand_from $commands" -a extend -d 'add time'
complete -c cdctl -n "not __fish_seen_subcommand_from $commands" -a watch -d 'follow countdowns'
complete -c cdctl -n "not __fish_seen_subcommand_from $commands" -a wait -d 'wait for countdowns'
complete -c cdctl -n "not __fish_seen_subcommand_from $commands" -a toggle -d 'pause or resume'
complete -c cdctl -n "not __fish_seen_subcommand_from $commands" -a skip -d "end a cycle's phase now"
complete -c cdctl -n "not __fish_seen_subcommand_from $commands" -a set -d 'change what it does while the machine sleeps'
complete -c cdctl -n "not __fish_seen_subcommand_from $commands" -a rm -d 'forget a finished countdown'
complete -c cdctl -n "not __fish_seen_subcommand_from $commands" -a stats -d "the daemon's counters"
complete -c cdctl -n "not __fish_seen_subcommand_from $commands" -a help -d 'help on a command'
# Whether the word being completed is a countdown name: any operand of watch and wait, the first
# of the others (start and extend take a DURATION second).
function __cdctl_wants_name
    set -l tokens (commandline -opc)
    set -l command
    set -l operands 0
    set -l skip 0
    for token in $tokens[2..-1]
        if test $skip -eq 1
            set skip 0
            continue
        end
        switch $token
            case --socket --format --since --state --prefix --events --at --then --then-each --cycle --repeat
                set skip 1
            case '-*'
            case '*'
                if test -z "$command"
                    set command $token
                else
                    set operands (math $operands + 1)
                end
        end
    end
    switch "$command"
        case watch wait
            return 0
        case start extend status cancel pause resume toggle skip set rm
            test $operands -eq 0
            return
    end
    return 1
end

complete -c cdctl -n "__fish_seen_subcommand_from status cancel pause resume extend toggle skip set rm watch wait start; and __cdctl_wants_name" -a '(__cdctl_names)'
complete -c cdctl -n "__fish_seen_subcommand_from list" -l state -x -a 'running paused done cancelled' -d 'only this state'
complete -c cdctl -n "__fish_seen_subcommand_from list" -l prefix -x -d 'only names starting with'
complete -c cdctl -n "__fish_seen_subcommand_from stats" -l json -d 'JSON output'
complete -c cdctl -n "__fish_seen_subcommand_from stats" -l prometheus -d 'Prometheus text format'
complete -c cdctl -n "__fish_seen_subcommand_from start" -l replace -d 'restart a running one'
complete -c cdctl -n "__fish_seen_subcommand_from start" -l if-idle -d 'leave a running one alone'
complete -c cdctl -n "__fish_seen_subcommand_from start" -l wait -d 'block until done'
complete -c cdctl -n "__fish_seen_subcommand_from start" -l at -x -a "09:30 17:00 now+25min now+1h" -d 'until a time of day'
complete -c cdctl -n "__fish_seen_subcommand_from start" -l then -x -a '(__fish_complete_command)' -d 'run a command when done'
complete -c cdctl -n "__fish_seen_subcommand_from start" -l pause-on-suspend -d 'stand still while the machine sleeps'
complete -c cdctl -n "__fish_seen_subcommand_from start" -l count-on-suspend -d 'count on while the machine sleeps'
complete -c cdctl -n "__fish_seen_subcommand_from status list watch" -l json -d 'JSON output'
complete -c cdctl -n "__fish_seen_subcommand_from watch" -l since -r -d 'replay after event number'
complete -c cdctl -n "__fish_seen_subcommand_from watch" -l events -x -a 'lifecycle all started tick paused resumed extended done cancelled snapshot removed' -d 'only these kinds'
complete -c cdctl -n "__fish_seen_subcommand_from status list" -l format -r -d 'template'
complete -c cdctl -n "__fish_seen_subcommand_from status" -l follow -d 'print on every change'
complete -c cdctl -n "__fish_seen_subcommand_from start" -l cycle -x -a '25m:work,5m:break' -d 'phases: DURATION[:LABEL],...'
complete -c cdctl -n "__fish_seen_subcommand_from start" -l pomodoro -d 'work 25m, break 5m, x4, long break 15m'
complete -c cdctl -n "__fish_seen_subcommand_from start" -l repeat -x -a 'forever 2 4' -d 'repeat the cycle'
complete -c cdctl -n "__fish_seen_subcommand_from start" -l then-each -x -a '(__fish_complete_command)' -d 'run a command at each phase'
complete -c cdctl -n "__fish_seen_subcommand_from set" -l pause-on-suspend -d 'stand still while the machine sleeps'
complete -c cdctl -n "__fish_seen_subcommand_from set" -l count-on-suspend -d 'count on while the machine sleeps'
