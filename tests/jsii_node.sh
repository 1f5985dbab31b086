#!/bin/sh
# Node.js for jsii in the tests (tests/conftest.py names it as JSII_NODE): every CDK synth the tests
# run (the infra fixtures' in-process apps, `make synth`, each cdk command of the documents, the
# fleet model's templates) starts one. V8's background threads, its parallel collector above all,
# cost a synth on this 2-core machine more than they save: `--single-threaded` and a larger young
# generation took a prod synth from 12 to 16 CPU s down to 9 (two runs each, alternated). These
# are V8 flags, which NODE_OPTIONS refuses: hence a wrapper. The templates are the same.
exec node --single-threaded --max-semi-space-size=32 "$@"
