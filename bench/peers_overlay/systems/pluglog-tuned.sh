# Adapter: pluglog with two librdkafka client settings changed (see bench/README.rst):
#   async producer  linger.ms=$KAFKA_LINGER_MS (bench default 1 instead of 5; a harness knob)
#   consumer        fetch.queue.backoff.ms=$KAFKA_FETCH_QUEUE_BACKOFF_MS (default 1 instead of
#                   librdkafka's 1000; via clients/kafka_client_tuned.py)
# Everything else is systems/kafka.sh and clients/kafka_client.py as shipped.
KAFKA_NAME=${KAFKA_NAME:-pluglog-tuned}
export KAFKA_LINGER_MS=${KAFKA_LINGER_MS:-1}
source "$PEERS_DIR/systems/kafka.sh"
peer_client() { "$PY" "$PEERS_DIR/clients/kafka_client_tuned.py" "$@"; }
