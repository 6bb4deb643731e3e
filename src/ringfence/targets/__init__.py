"""Where commands run: lab namespaces, SSH hosts, Kubernetes pods."""
