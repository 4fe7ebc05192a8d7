# bash completion for tcplab: `make install` installs this file as
# PREFIX/share/bash-completion/completions/tcplab (bash-completion loads it on the first TAB after
# `tcplab`).  In a clone: `. experiments/lib/completion.bash; complete -F _tcplab ./run.sh`.
# Completes the subcommands (kcidb: its own options, then a file), the options, the unit names
# (read from the unit table the command itself uses, so never a copy), the kernel series after
# --kernel and directories after --out.

# _tcplab_units CMD: the unit names of the unit table that CMD (tcplab or a clone's run.sh) reads:
# $TCPLAB_EXPERIMENTS/units, else experiments/units beside a clone's run.sh, else an installed
# tcplab's PREFIX/share/tcplab/experiments/units (PREFIX: the directory above its bin/).
_tcplab_units() {
	local cmd=$1 table name rest
	if [ -n "${TCPLAB_EXPERIMENTS:-}" ]; then
		table=$TCPLAB_EXPERIMENTS/units
	else
		case $cmd in */*) ;; *) cmd=$(type -P -- "$cmd") || return 0 ;; esac
		cmd=$(readlink -f -- "$cmd") || return 0
		table=${cmd%/*}/experiments/units
		[ -f "$table" ] || table=${cmd%/*/*}/share/tcplab/experiments/units
	fi
	[ -r "$table" ] || return 0
	while read -r name rest; do
		case $name in '' | '#'*) continue ;; esac
		printf '%s\n' "$name"
	done < "$table"
}

_tcplab() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev="" first=${COMP_WORDS[1]:-}
	[ "$COMP_CWORD" -lt 1 ] || prev=${COMP_WORDS[COMP_CWORD - 1]}
	local opts="--quick --all --kernel --accel --out --mtu --allow-foreign-out --ktap --list
		--help --version"
	COMPREPLY=()
	case $prev in
	--kernel)	# the Debian series the matrix runs (docs/kernel-matrix.md), and all of them
		mapfile -t COMPREPLY < <(compgen -W "5.10 6.1 6.12 7.2 all" -- "$cur")
		return 0 ;;
	--accel) mapfile -t COMPREPLY < <(compgen -W "tcg kvm" -- "$cur"); return 0 ;;
	--out) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); compopt -o filenames 2> /dev/null
		return 0 ;;
	--mtu | --origin | --build-id | --run-id) return 0 ;;
	esac
	if [ "$COMP_CWORD" -gt 1 ] && [ "$first" = kcidb ]; then	# options, then the KTAP file
		if [[ $cur == -* ]]; then
			mapfile -t COMPREPLY < <(compgen -W "--origin --build-id --run-id" -- "$cur")
		else
			mapfile -t COMPREPLY < <(compgen -f -- "$cur"); compopt -o filenames 2> /dev/null
		fi
		return 0
	fi
	if [ "$COMP_CWORD" -gt 1 ] && { [ "$first" = diff ] || [ "$first" = matrix ]; }; then
		[ "$first" != matrix ] || [[ $cur != -* ]] || {
			mapfile -t COMPREPLY < <(compgen -W "--out" -- "$cur"); return 0; }
		mapfile -t COMPREPLY < <(compgen -d -- "$cur"); compopt -o filenames 2> /dev/null
		return 0
	fi
	if [[ $cur == -* ]]; then
		mapfile -t COMPREPLY < <(compgen -W "$opts" -- "$cur")
		return 0
	fi
	local words
	words=$(_tcplab_units "${COMP_WORDS[0]}")
	[ "$COMP_CWORD" -ne 1 ] || words="diff matrix kcidb sandbox $words"
	mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
}

complete -F _tcplab tcplab
