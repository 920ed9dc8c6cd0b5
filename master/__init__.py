"""The master process (control plane): arrives with the "Cluster" issue."""
