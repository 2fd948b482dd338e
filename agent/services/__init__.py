"""Host services: the node's own OS services (systemd, launchd, the Windows SCM) behind one seam,
``ServiceManager``, with the policy that decides what the daemon may touch (``policy``) and the
routes of ``/agent/v1/services`` (``api``)."""
