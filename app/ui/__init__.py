"""The Qt skin: widgets that render view-model snapshots and forward the user's intent."""
