#!/bin/bash
# Stands in for pip inside run.sh's namespaces, where no package index is
# reachable: `pip install NAME...` succeeds when each NAME (version pins and
# extras cut off, '-' read as '_') already imports in the interpreter the
# tests run with (Debian's packages), and fails naming it otherwise. Other
# pip commands fail.
[ "${1:-}" = install ] || { echo "pip.sh: only 'pip install' is stood in for" >&2; exit 1; }
shift
rc=0
for a in "$@"; do
	case $a in -*) continue ;; esac
	m=${a%%[<>=\[]*}
	m=${m//-/_}
	if "$PYTHON" -c "import $m" 2>/dev/null; then
		echo "pip.sh: $a is installed"
	else
		echo "pip.sh: $a is not installed (no package index here)" >&2
		rc=1
	fi
done
exit $rc
