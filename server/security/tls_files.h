#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace quill::server {

// Where the server's TLS material lives (PEM files). All empty: plaintext.
struct TlsFiles {
  std::string cert;       // --tls-cert: the certificate chain, leaf first
  std::string key;        // --tls-key: its private key
  std::string client_ca;  // --tls-client-ca: if set, clients must present a certificate
                          // signed by one of these CAs (mutual TLS)
  bool enabled() const { return !cert.empty() || !key.empty() || !client_ca.empty(); }
};

// The files' contents.
struct TlsPem {
  std::string cert_chain;
  std::string private_key;
  std::string client_ca;  // empty: no client certificates asked for
};

// Reads and sanity-checks the files: cert and key must both be given, each must be
// readable and look like PEM ("-----BEGIN"), so that a wrong path fails at startup with
// the flag's name instead of at the first handshake.
absl::StatusOr<TlsPem> ReadTlsFiles(const TlsFiles& files);

}  // namespace quill::server
