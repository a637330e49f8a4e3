// Package tlsreload serves the gRPC listener's TLS material from files and
// swaps in new material when the files change, without a restart: the server
// certificate and key (GRPC_SERVER_TLS_CERT/KEY) and, for mutual TLS, the
// client CA (GRPC_CLIENT_TLS_CACERT) with an optional DNS SAN that client
// certificates must carry (GRPC_CLIENT_TLS_SAN).
//
// The first load must succeed (it is a startup error otherwise). A later load
// that fails, such as a half-written certificate, keeps the material in use,
// so a broken rotation never takes the service down.
package tlsreload
