from traceprof.cli import run

run()
