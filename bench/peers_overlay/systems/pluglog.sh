# Adapter: pluglog through the harness's Kafka adapter (systems/kafka.sh), unchanged
# client settings. bench/paper_bench.py sets KAFKA_SERVER_CMD to a twistd command line.
KAFKA_NAME=${KAFKA_NAME:-pluglog}
source "$PEERS_DIR/systems/kafka.sh"
