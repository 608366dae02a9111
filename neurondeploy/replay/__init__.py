"""Replays: what AWS would run for the requests a plan renders, run here.

Each replay takes the recorded request (CreateModel + CreateEndpointConfig, CreateTrainingJob, the launch template's
UserData) and does what the service does with it: fetch from S3, unpack, set the container's environment, start the
image's command as a process, hold it to the service's timeouts, sync checkpoints and pack outputs. The host paths a
container or instance would see (``/opt/ml``, ``/opt``, ``/etc/systemd/system``, ``/var/log``) live under a sandbox
root; that mapping and a ``systemctl`` shim are the only stand-ins. The Neuron runtime is not here: what runs is a CPU
stand-in of it, announced by :data:`neurondeploy.standin.CPU_STANDIN_ENV` in every process a replay starts.
"""
