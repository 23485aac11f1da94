#!/bin/sh
# The image's entry point. Flags alone (the image's CMD, `docker run IMAGE
# --model-repository=...`, a pod whose args are only flags) go to
# tritonserver. Anything else is a command and runs as given: KServe's Triton
# runtime passes `tritonserver --model-store=...` as args, and Triton users
# run `docker run IMAGE tritonserver ...` or a shell, as NVIDIA's image
# takes them. exec either way, so the server is PID 1 and gets SIGTERM.
set -e
if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
  set -- tritonserver "$@"
fi
exec "$@"
