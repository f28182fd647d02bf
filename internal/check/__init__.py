"""gpu-scheduler-check: the seed's tiny probe service (see ``service``)."""
