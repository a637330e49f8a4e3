# sluice on an empty base: one static binary, no shell, no package manager.
# Built offline by `make image` (buildah or podman), which first builds the
# binary this file copies in: bin/image/sluice (CGO_ENABLED=0, linux).
FROM scratch

# CA roots for TLS to Redis, memcached, an xDS server or an OTLP collector;
# copied from the build machine (Debian: the ca-certificates package).
COPY bin/image/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY bin/image/sluice /sluice

# No /etc/passwd in scratch: a numeric unprivileged user (the distroless
# "nonroot" id), never root.
USER 65532:65532

# 8080 HTTP /json and /healthcheck, 8081 gRPC, 6070 debug, 9090 pull metrics
# (USE_PROMETHEUS=true).
EXPOSE 8080 8081 6070 9090

# scratch has no curl: the binary asks its own /healthcheck (on PORT).
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["/sluice", "healthcheck"]

ENTRYPOINT ["/sluice"]
CMD ["ratelimit"]
