# Sourced by the Nsight Compute scripts (scripts/*-profile.sh), which run on the GPU machine from
# the repository root as `scripts/NAME-profile.sh BUILD [NAME...]`:
#   ncu_args DEFAULT_OUT "$@"   B: the build (libkiln.so, tools/kiln-bench; default build), WANT:
#                               the profiles named (none: all), OUT: the log folder ($OUT, else
#                               DEFAULT_OUT), created
#   ncu_prof NAME REGEX SKIP COUNT CMD...
#                               when WANT names NAME: COUNT launches of the kernels matching REGEX,
#                               after SKIP of them, with the sections $NCU_SECTIONS and the metrics
#                               $NCU_METRICS (if any); the report $OUT/ncu-NAME.ncu-rep, ncu's
#                               output ncu-NAME.log, every section's details ncu-NAME.txt and, with
#                               NCU_SASS=1, the stall samples per SASS line ncu-NAME-sass.csv;
#                               prints the lines of the details that match $NCU_GREP
# Clocks are left alone (--clock-control none): figures compare within one run, not across calls.
ncu_args() {
  OUT=${OUT:-$1}
  B=${2:-build}
  shift $(($# > 1 ? 2 : 1))
  WANT="$*"
  mkdir -p "$OUT"
}
ncu_prof() {
  local name=$1 k=$2 s=$3 c=$4
  shift 4
  case " ${WANT:-$name} " in *" $name "*) ;; *) return 0 ;; esac
  timeout "${NCU_TIMEOUT:-240}" ncu --clock-control none -k "regex:$k" -s "$s" -c "$c" $NCU_SECTIONS \
    ${NCU_METRICS:+--metrics "$NCU_METRICS"} -o "$OUT/ncu-$name" -f "$@" >"$OUT/ncu-$name.log" 2>&1
  echo "ncu $name: exit $?"
  ncu -i "$OUT/ncu-$name.ncu-rep" --page details >"$OUT/ncu-$name.txt" 2>&1
  if [ "${NCU_SASS:-0}" = 1 ]; then
    ncu -i "$OUT/ncu-$name.ncu-rep" --page source --csv --print-source sass >"$OUT/ncu-$name-sass.csv" 2>/dev/null
  fi
  grep -E "$NCU_GREP" "$OUT/ncu-$name.txt" | head -40
}
