#!/bin/sh
# SageMaker starts inference containers as `docker run IMAGE serve`; anything else runs as given.
# The artifact is where SageMaker unpacks ModelDataUrl (/opt/ml/model); serving settings arrive in
# $NEURONDEPLOY_SERVING (JSON of the spec's serving section), set by the plan's CreateModel request.
# A replay here (neurondeploy.replay.hosting) binds loopback with $NEURONDEPLOY_BIND_HOST.
set -eu
if [ "$#" -eq 0 ] || [ "$1" = "serve" ]; then
    exec neurondeploy serve "${NEURONDEPLOY_ARTIFACT:-/opt/ml/model}" \
        --host "${NEURONDEPLOY_BIND_HOST:-0.0.0.0}" --port "${SAGEMAKER_BIND_TO_PORT:-8080}" --log-level "${NEURONDEPLOY_LOG_LEVEL:-info}"
fi
exec "$@"
