#!/usr/bin/env bash
# Print deb-src lines derived from this machine's own apt sources (one-line and deb822 files), so no
# mirror host is ever written into the repository and the system's apt configuration is untouched.
#   deb_src_lines.sh            the Debian entries of this release (suite = codename or codename-*)
#   deb_src_lines.sh trixie     the same entries with the suite renamed: codename -> trixie,
#                               codename-updates -> trixie-updates, codename-security -> trixie-security
# Used by tests/rigs/kube_real/build.sh (kubernetes, this release) and tests/rigs/python/build.sh
# (python3.13, Debian 13's).
set -euo pipefail
# shellcheck disable=SC1091
CODENAME="$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")"
TARGET="${1:-$CODENAME}"

one_line_sources() {  # classic "deb [opts] uri suite comp..." files
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -f "$f" ]] || continue
        awk -v cn="$CODENAME" -v to="$TARGET" '
            $1 == "deb" {
                i = 2; opts = ""
                if ($2 ~ /^\[/) { while ($i !~ /\]$/) { opts = opts $i " "; i++ } opts = opts $i " "; i++ }
                uri = $i; suite = $(i + 1)
                if (suite != cn && index(suite, cn "-") != 1) next
                suite = to substr(suite, length(cn) + 1)
                line = "deb-src " opts uri " " suite
                for (j = i + 2; j <= NF; j++) line = line " " $j
                print line
            }' "$f"
    done
}

deb822_sources() {  # "Types: deb / URIs: / Suites: / Components: / Signed-By:" stanzas
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -f "$f" ]] || continue
        awk -v cn="$CODENAME" -v to="$TARGET" '
            function flush(   n, m, u, s, i, j, uris, suites, opts) {
                if (types ~ /(^| )deb( |$)/ && enabled != "no" && uri_s != "") {
                    opts = (signed ~ /^\//) ? "[signed-by=" signed "] " : ""
                    n = split(uri_s, uris, " "); m = split(suite_s, suites, " ")
                    for (i = 1; i <= n; i++) for (j = 1; j <= m; j++) {
                        s = suites[j]
                        if (s == cn || index(s, cn "-") == 1)
                            print "deb-src " opts uris[i] " " to substr(s, length(cn) + 1) " " comps
                    }
                }
                types = uri_s = suite_s = comps = signed = enabled = ""
            }
            /^[ \t]*$/ { flush(); next }
            /^[ \t#]/  { next }                       # comments and continuation lines (inline keys)
            {
                key = tolower($1); sub(/:$/, "", key); val = $0; sub(/^[^:]*:[ \t]*/, "", val)
                if (key == "types") types = val
                else if (key == "uris") uri_s = val
                else if (key == "suites") suite_s = val
                else if (key == "components") comps = val
                else if (key == "signed-by") signed = val
                else if (key == "enabled") enabled = tolower(val)
            }
            END { flush() }' "$f"
    done
}

{ one_line_sources; deb822_sources; } | sort -u
