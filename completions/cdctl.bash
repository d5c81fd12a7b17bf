# bash completion for cdctl                                   -*- shell-script -*-
# Commands, options, and live countdown names from the running daemon (cdctl __complete names).
#
# Countdown names may contain ':' (otp:+4915112345678), which bash's COMP_WORDBREAKS splits words
# at: the words are therefore taken from COMP_LINE split at blanks, and the part of each reply up
# to the last ':' of the current word is trimmed, since bash replaces only what follows it.

_cdctl_names() {
    local socket=$1
    cdctl ${socket:+--socket "$socket"} __complete names 2>/dev/null
}

_cdctl() {
    local -a words
    local line=${COMP_LINE:0:COMP_POINT} joined="" part j
    if [[ -z $COMP_LINE ]]; then
        # Called without COMP_LINE (another completer's wrapper): the line again from COMP_WORDS,
        # which bash split at ':' too; a ':' and what follows it belong to the word before.
        for ((j = 0; j <= COMP_CWORD; j++)); do
            part=${COMP_WORDS[j]}
            if [[ $part == : || $joined == *: ]]; then joined+=$part
            elif ((j == 0)); then joined=$part
            else joined+=" $part"; fi
        done
        line=$joined
    fi
    read -ra words <<< "$line"
    [[ -z $line || $line == *[[:blank:]] ]] && words+=("")
    local cword=$((${#words[@]} - 1))
    local cur=${words[cword]} prev=${words[cword-1]}
    local command="" socket="" operands=0 i word
    for ((i = 1; i < cword; i++)); do
        word=${words[i]}
        case $word in
            --socket) socket=${words[i+1]}; ((i++)) ;;
            --socket=*) socket=${word#--socket=} ;;
            --format|--since|--state|--prefix|--events|--at|--then|--then-each|--cycle|--repeat) ((i++)) ;;
            -*) ;;
            *) if [[ -z $command ]]; then command=$word; else ((operands++)); fi ;;
        esac
    done

    case $prev in
        --socket) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        --format) COMPREPLY=($(compgen -W "'{name} {remaining}' '{name} {bar} {remaining}' '{remaining_s}'" -- "$cur")); return ;;
        --since|--prefix) return ;;
        # One-word forms only: compgen's words are split at blanks.
        --at) COMPREPLY=($(compgen -W "09:30 17:00 now+25min now+1h" -- "$cur")); return ;;
        --then|--then-each) COMPREPLY=($(compgen -c -- "$cur")); return ;;
        --cycle) COMPREPLY=($(compgen -W "25m:work,5m:break 50m:work,10m:break 52m:work,17m:break" -- "$cur")); return ;;
        --repeat) COMPREPLY=($(compgen -W "forever 2 4" -- "$cur")); return ;;
        --events) COMPREPLY=($(compgen -W "lifecycle all started tick paused resumed extended done cancelled snapshot removed phase" -- "$cur")); return ;;
        --state) COMPREPLY=($(compgen -W "running paused done cancelled" -- "$cur")); return ;;
    esac

    local common="--socket --no-color --verbose --help --version"
    if [[ -z $command ]]; then
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "$common" -- "$cur"))
        else
            COMPREPLY=($(compgen -W "start status list cancel pause resume extend toggle skip set rm watch wait stats help" -- "$cur"))
        fi
        return
    fi

    local options=""
    case $command in
        start) options="--at --cycle --pomodoro --repeat --replace --if-idle --wait --then --then-each --pause-on-suspend --count-on-suspend" ;;
        set) options="--pause-on-suspend --count-on-suspend" ;;
        status) options="--json --format --follow" ;;
        list) options="--json --format --state --prefix" ;;
        watch) options="--json --since --events" ;;
        stats) options="--json --prometheus" ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$options $common" -- "$cur"))
        return
    fi
    case $command in
        start|extend)
            # NAME, then DURATION: a name is offered only in the first place.
            if ((operands == 0)); then
                COMPREPLY=($(compgen -W "$(_cdctl_names "$socket")" -- "$cur"))
            else
                COMPREPLY=($(compgen -W "30s 1m 5m 10m 25m 1h" -- "$cur"))
            fi ;;
        status|cancel|pause|resume|toggle|skip|set|rm)
            ((operands == 0)) && COMPREPLY=($(compgen -W "$(_cdctl_names "$socket")" -- "$cur")) ;;
        watch|wait)
            COMPREPLY=($(compgen -W "$(_cdctl_names "$socket")" -- "$cur")) ;;
        help)
            ((operands == 0)) && COMPREPLY=($(compgen -W "start status list cancel pause resume extend toggle skip set rm watch wait stats" -- "$cur")) ;;
    esac
    # Bash replaces only what follows the last ':' of the word: offer only that part.
    if [[ $cur == *:* && $COMP_WORDBREAKS == *:* ]]; then
        local before=${cur%"${cur##*:}"}
        local index
        for index in "${!COMPREPLY[@]}"; do
            COMPREPLY[index]=${COMPREPLY[index]#"$before"}
        done
    fi
}

complete -F _cdctl cdctl
