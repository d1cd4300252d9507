#!/bin/sh
# `npm ci` for the book's browser assets (MathJax, Pyodide's core; package-lock.json), run by
# `make assets`. Where it fails, one line says what could not be fetched and from where (npm's own
# output is a stack trace of some twenty lines); npm's whole output is kept in .cache/npm-ci.log.
log=.cache/npm-ci.log
mkdir -p .cache
if npm ci --no-audit --no-fund --loglevel=error >"$log" 2>&1; then
  exit 0
fi
fetch=$(grep -m1 -o 'request to [^ ]* failed, reason: .*' "$log")
if [ -n "$fetch" ]; then
  echo "make: npm ci could not fetch the browser assets (package-lock.json) from the npm registry" \
       "$(npm config get registry): $fetch; the book needs the registry once (npm's log: $log)"
else
  echo "make: npm ci failed: $(grep -m1 '^npm error' "$log" | sed 's/^npm error //') (npm's log: $log)"
fi
exit 1
