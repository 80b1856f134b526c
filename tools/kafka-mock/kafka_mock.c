/*
 * txo-kafka-mock: a Kafka "cluster" for demos and `make run BROKER=kafka` on machines without a
 * Kafka server (Debian ships none): librdkafka's mock cluster (rdkafka_mock.h) in a process of
 * its own, the same one the tests use (tests/support/testkafka.h).
 *
 *   txo-kafka-mock [--brokers N] [--topic NAME[:PARTITIONS]]...
 *
 * Starts N brokers (default 3) on 127.0.0.1 with ephemeral ports, creates the given topics
 * (replication factor min(3, N); other topics are created on first use with 4 partitions),
 * prints the bootstrap servers on one line of stdout ("127.0.0.1:p1,127.0.0.1:p2,...", the
 * value of --kafka-brokers) and runs until SIGINT or SIGTERM. Everything is in memory: a
 * restart starts empty.
 *
 * It is a mock, not Kafka: experimental librdkafka API, no persistence, no ACLs, and a group
 * coordinator stricter than Kafka's about commits during a rebalance (docs/brokers.md). A
 * program of its own so that test scaffolding never ships in the `txo` binary.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

static int usage(void)
{
    fprintf(stderr, "usage: txo-kafka-mock [--brokers N] [--topic NAME[:PARTITIONS]]...\n");
    return 2;
}

int main(int argc, char **argv)
{
    int brokers = 3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--brokers") == 0 && i + 1 < argc) {
            brokers = (int)strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--topic") == 0 && i + 1 < argc) {
            i++; /* created below, once the cluster runs */
        } else {
            return usage();
        }
    }
    if (brokers < 1 || brokers > 16) {
        fprintf(stderr, "txo-kafka-mock: --brokers must be 1..16\n");
        return 2;
    }

    /* Block the signals before librdkafka starts its threads, so only sigwait() sees them. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);

    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "txo-kafka-mock: %s\n", errstr);
        return 1;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (rk == NULL) {
        fprintf(stderr, "txo-kafka-mock: %s\n", errstr);
        return 1;
    }
    rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(rk, brokers);
    if (mc == NULL) {
        fprintf(stderr, "txo-kafka-mock: cannot start the mock cluster\n");
        rd_kafka_destroy(rk);
        return 1;
    }
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        if (strcmp(argv[i], "--topic") != 0)
            continue;
        char name[256];
        snprintf(name, sizeof(name), "%s", argv[++i]);
        char *colon = strchr(name, ':');
        int parts = 4;
        if (colon != NULL) {
            *colon = '\0';
            parts = (int)strtol(colon + 1, NULL, 10);
        }
        rd_kafka_resp_err_t e =
            rd_kafka_mock_topic_create(mc, name, parts, brokers < 3 ? brokers : 3);
        if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
            fprintf(stderr, "txo-kafka-mock: topic %s: %s\n", name, rd_kafka_err2str(e));
            rc = 1;
        }
    }
    if (rc == 0) {
        printf("%s\n", rd_kafka_mock_cluster_bootstraps(mc));
        fflush(stdout);
        int sig = 0;
        sigwait(&stop, &sig);
    }
    rd_kafka_mock_cluster_destroy(mc);
    rd_kafka_destroy(rk);
    return rc;
}
